import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { migrate } from '../src/db/start/migrate.ts'
import { createTestDatabase, quietLog } from './helpers/database.ts'
import { startTestServer } from './helpers/server.ts'

describe('health and readiness', () => {
  test('GET /healthz is 200 {"status":"ok"}', async () => {
    const s = await startTestServer({ after })
    const res = await fetch(`${s.base}/healthz`)
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), { status: 'ok' })
  })

  test('GET /readyz is 200 {"status":"ready"} when the schema is current', async () => {
    const s = await startTestServer({ after })
    const res = await fetch(`${s.base}/readyz`)
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), { status: 'ready' })
  })

  test('GET /readyz is 503/50301 with Retry-After while a migration is pending', async () => {
    const s = await startTestServer({ after })
    await migrate(s.db.url, quietLog, 'down', 1)
    const res = await fetch(`${s.base}/readyz`)
    assert.equal(res.status, 503)
    assert.ok(res.headers.get('retry-after'))
    assert.equal(((await res.json()) as { error: number }).error, 50301)
    await migrate(s.db.url, quietLog)
    assert.equal((await fetch(`${s.base}/readyz`)).status, 200)
  })

  test('GET /readyz is 503/50301 and /healthz still 200 when the database is gone; the 503 counts in plant_store_database_unavailable_total', async () => {
    const db = await createTestDatabase({ after })
    const s = await startTestServer({ after }, { db })
    // Dropping the database under the server: its connections are terminated.
    await db.sql.end()
    const url = new URL(db.url)
    const admin = (await import('postgres')).default(
      url.toString().replace(url.pathname, '/postgres'),
      { max: 1, onnotice: () => {} },
    )
    await admin.unsafe(`drop database ${url.pathname.slice(1)} with (force)`)
    await admin.end()
    const unavailable = async () =>
      [
        ...(await (await fetch(`${s.base}/metrics`)).text()).matchAll(
          /^plant_store_database_unavailable_total\{reason="\w+"\} (\d+)$/gm,
        ),
      ].reduce((sum, m) => sum + Number(m[1]), 0)
    const before = await unavailable()
    const ready = await fetch(`${s.base}/readyz`)
    assert.equal(ready.status, 503)
    assert.equal(((await ready.json()) as { error: number }).error, 50301)
    assert.equal((await fetch(`${s.base}/healthz`)).status, 200)
    assert.equal(await unavailable(), before + 1, 'the 503 is counted as every database 503 is')
  })
})
