import { readFileSync } from 'node:fs'
import { isIP, type Socket } from 'node:net'
import tls from 'node:tls'
import type { AttemptHooks } from './hosts.ts'
import { connectionError } from './unavailable.ts'
import { type DatabaseUrl, readDatabaseUrl } from './url.ts'

// TLS to PostgreSQL as libpq's URL parameters ask for it: the connector (hosts.ts) secures each
// socket itself, and the driver is handed a socket that is secure already.

/** libpq's `sslmode`: `allow` is taken as `prefer` (TLS when the server offers it). */
type TlsMode = 'disable' | 'allow' | 'prefer' | 'require' | 'verify-ca' | 'verify-full'
const tlsModes: readonly TlsMode[] = [
  'disable',
  'allow',
  'prefer',
  'require',
  'verify-ca',
  'verify-full',
]

/** How a connection is secured: libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey`. */
export type TlsSettings = {
  readonly mode: TlsMode
  readonly ca?: Buffer
  readonly cert?: Buffer
  readonly key?: Buffer
}

/**
 * The TLS settings of a database URL, as libpq reads them: `sslmode` (`disable` when absent, the
 * driver's default), `sslrootcert` (a CA file, or `system` for Node's CAs, which
 * NODE_EXTRA_CA_CERTS extends; `sslmode=verify-full` then), `sslcert` and `sslkey` (a client
 * certificate). Throws, naming the parameter, for a mode it does not know or a file it cannot read.
 */
export function tlsSettingsOf(url: string | DatabaseUrl): TlsSettings {
  const { query } = typeof url === 'string' ? readDatabaseUrl(url) : url
  const read = (name: string): Buffer | undefined => {
    const file = query.get(name)
    if (!file || (name === 'sslrootcert' && file === 'system')) return undefined
    try {
      return readFileSync(file)
    } catch (err) {
      throw new Error(`${name} ${file} cannot be read: ${(err as Error).message}`)
    }
  }
  const given =
    query.get('sslmode') ?? (query.get('sslrootcert') === 'system' ? 'verify-full' : 'disable')
  if (!tlsModes.includes(given as TlsMode))
    throw new Error(`sslmode ${given} is not one of ${tlsModes.join(', ')}`)
  const ca = read('sslrootcert')
  const cert = read('sslcert')
  const key = read('sslkey')
  return {
    mode: given as TlsMode,
    ...(ca && { ca }),
    ...(cert && { cert }),
    ...(key && { key }),
  }
}

// PostgreSQL's SSLRequest: length 8, code 80877103.
const sslRequest = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])

/**
 * Secures a connected socket as `settings` ask: an SSLRequest, then a TLS handshake within
 * `timeoutMs` (verifying the chain for `verify-ca`, the chain and the host for `verify-full`).
 * A server that refuses TLS gets the plain socket back under `allow` or `prefer`, else an error.
 * The secure socket keeps a listener for errors for good: the driver drops its own when the
 * connection closes, and a late write error (a socket cut loose) would otherwise end the process.
 */
export async function startTls(
  raw: Socket,
  host: string,
  settings: TlsSettings,
  timeoutMs: number,
  { secured, signal }: AttemptHooks,
): Promise<Socket> {
  const { mode } = settings
  const within = <T>(work: (resolve: (v: T) => void, reject: (e: Error) => void) => void) =>
    new Promise<T>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', aborted)
      }
      const fail = (err: Error) => {
        done()
        raw.destroy()
        reject(err)
      }
      const aborted = () => fail(connectionError('aborted', 'ECONNRESET'))
      const timer = setTimeout(
        () =>
          fail(connectionError(`no TLS from ${host} within ${timeoutMs} ms`, 'CONNECT_TIMEOUT')),
        timeoutMs,
      )
      signal?.addEventListener('abort', aborted, { once: true })
      work((v) => {
        done()
        resolve(v)
      }, fail)
    })
  const answer = await within<number>((resolve, reject) => {
    raw.once('data', (d: Buffer) => resolve(d[0] ?? 0))
    raw.once('error', reject)
    raw.once('close', () => reject(connectionError(`connect ECONNRESET ${host}`, 'ECONNRESET')))
    raw.write(sslRequest)
  })
  raw.removeAllListeners('error')
  raw.removeAllListeners('close')
  raw.on('error', () => {})
  if (answer === 0x4e /* N */) {
    if (mode === 'allow' || mode === 'prefer') return raw
    raw.destroy()
    throw connectionError(`${host} does not take TLS connections (sslmode=${mode})`, 'ECONNREFUSED')
  }
  if (answer !== 0x53 /* S */) {
    raw.destroy()
    throw connectionError(`${host} answered the TLS request with ${answer}`, 'ECONNRESET')
  }
  const verify = mode === 'verify-ca' || mode === 'verify-full'
  const secure = tls.connect({
    socket: raw,
    host,
    ...(isIP(host) ? {} : { servername: host }),
    rejectUnauthorized: verify,
    ...(mode === 'verify-full' ? {} : { checkServerIdentity: () => undefined }),
    ...(settings.ca && { ca: settings.ca }),
    ...(settings.cert && { cert: settings.cert }),
    ...(settings.key && { key: settings.key }),
  })
  secured?.(raw, secure)
  secure.on('error', () => {})
  await within<void>((resolve, reject) => {
    secure.once('secureConnect', () => resolve())
    secure.once('error', reject)
  }).catch((err: unknown) => {
    secure.destroy()
    throw err
  })
  Object.assign(secure, {
    host: (raw as Socket & { host?: string }).host ?? host,
    port: (raw as Socket & { port?: number }).port,
  })
  return secure
}
