import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)

/** A test CA's certificate, and a server certificate it signed, in a folder. */
export type TestCertificates = {
  /** The CA's certificate (PEM), for NODE_EXTRA_CA_CERTS. */
  readonly caFile: string
  /** The server's certificate and key (PEM), for PostgreSQL's ssl_cert_file and ssl_key_file. */
  readonly certFile: string
  readonly keyFile: string
}

/**
 * Makes a CA and a server certificate it signs, for 127.0.0.1, 127.0.0.2 and localhost, with
 * Debian's openssl (P-256 keys, valid 2 days), in `dir`.
 */
export async function makeTestCertificates(dir: string): Promise<TestCertificates> {
  const at = (name: string) => join(dir, name)
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  await run('openssl', [
    'req',
    '-x509',
    ...key,
    '-keyout',
    at('ca.key'),
    '-out',
    at('ca.pem'),
    '-days',
    '2',
    '-subj',
    '/CN=plant-store test CA',
  ])
  await run('openssl', [
    'req',
    ...key,
    '-keyout',
    at('server.key'),
    '-out',
    at('server.csr'),
    '-subj',
    '/CN=127.0.0.1',
  ])
  await writeFile(at('server.ext'), 'subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost\n')
  await run('openssl', [
    'x509',
    '-req',
    '-in',
    at('server.csr'),
    '-CA',
    at('ca.pem'),
    '-CAkey',
    at('ca.key'),
    '-CAcreateserial',
    '-out',
    at('server.pem'),
    '-days',
    '2',
    '-extfile',
    at('server.ext'),
  ])
  return { caFile: at('ca.pem'), certFile: at('server.pem'), keyFile: at('server.key') }
}
