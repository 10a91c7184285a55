import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createTestDatabase } from './helpers/database.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'

// On a PostgreSQL of the operator's own, the service warns once at start about a setting known to
// hurt a growing table, and starts regardless.

async function startWith(walCompression: string) {
  const db = await createTestDatabase({ after })
  const name = new URL(db.url).pathname.slice(1)
  await db.sql.unsafe(`alter database ${name} set wal_compression = '${walCompression}'`)
  return startTestServer({ after }, { db })
}

const walWarnings = (logs: Record<string, unknown>[]) =>
  logs.filter((l) => l.level === 'warn' && String(l.message).startsWith('wal_compression is off'))

describe("warnings about the operator's PostgreSQL settings", () => {
  test('wal_compression = off: one warning at start that says what it costs and what to set; the service serves', async () => {
    const s = await startWith('off')
    const warnings = walWarnings(s.logs)
    assert.equal(warnings.length, 1)
    assert.match(String(warnings[0]?.message), /about 5 KB of WAL.*wal_compression = lz4/)
    assert.equal((await s.post({ id: uniqueId(), name: 'warned' })).status, 200)
    assert.equal(walWarnings(s.logs).length, 1)
  })

  test('wal_compression = pglz: one warning that it costs CPU for little, naming lz4 and off; the service serves', async () => {
    const s = await startWith('pglz')
    const warnings = s.logs.filter(
      (l) => l.level === 'warn' && String(l.message).startsWith('wal_compression is pglz'),
    )
    assert.equal(warnings.length, 1)
    assert.match(String(warnings[0]?.message), /spends CPU.*wal_compression = lz4.*else off/)
    assert.deepEqual(walWarnings(s.logs), [], 'not the warning for off')
    assert.equal((await s.post({ id: uniqueId(), name: 'warned' })).status, 200)
  })
})
