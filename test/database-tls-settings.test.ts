import assert from 'node:assert/strict'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { tlsSettingsOf } from '../src/db/reach/tls.ts'
import { withoutTlsParameters } from '../src/db/reach/url.ts'
import { tempDir } from './helpers/temp-dir.ts'

// How a database URL's TLS parameters are read (libpq's names) and kept from the driver, which
// would send the ones it does not know to the server as settings.

describe("a database URL's TLS parameters", () => {
  test('sslmode as libpq names it, disable when absent; sslrootcert=system means verify-full', () => {
    assert.equal(tlsSettingsOf('postgres://u@h/db').mode, 'disable')
    assert.equal(tlsSettingsOf('postgres://u@h/db?sslmode=require').mode, 'require')
    assert.equal(tlsSettingsOf('postgres://u@h/db?sslrootcert=system').mode, 'verify-full')
    assert.throws(
      () => tlsSettingsOf('postgres://u@h/db?sslmode=sometimes'),
      /sslmode sometimes is not one of disable, allow, prefer, require, verify-ca, verify-full/,
    )
  })

  test('sslrootcert, sslcert and sslkey name files that are read; one that cannot be read is named', async () => {
    const { dir } = await tempDir({ after }, 'plant-store-tls-')
    const ca = join(dir, 'ca.pem')
    await writeFile(ca, 'the CA')
    const settings = tlsSettingsOf(`postgres://u@h/db?sslmode=verify-full&sslrootcert=${ca}`)
    assert.equal(settings.ca?.toString(), 'the CA')
    assert.throws(
      () => tlsSettingsOf(`postgres://u@h/db?sslmode=verify-full&sslkey=${join(dir, 'none')}`),
      /^Error: sslkey .*none cannot be read/,
    )
  })

  test('the driver gets the URL without them, every other parameter kept', () => {
    assert.equal(
      withoutTlsParameters(
        'postgres://u@h1,h2/db?sslmode=verify-full&target_session_attrs=primary&sslrootcert=/ca.pem',
      ),
      'postgres://u@h1,h2/db?target_session_attrs=primary',
    )
    assert.equal(withoutTlsParameters('postgres://u@h/db?sslmode=require'), 'postgres://u@h/db')
    assert.equal(withoutTlsParameters('postgres://u@h/db'), 'postgres://u@h/db')
  })
})
