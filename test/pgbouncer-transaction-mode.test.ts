import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { parseConfig } from '../src/config.ts'
import { createLog } from '../src/log.ts'
import { startService } from '../src/service.ts'
import { createTestDatabase } from './helpers/database.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from './helpers/pgbouncer.ts'
import { tokenFor } from './helpers/process.ts'
import { uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

// Outside CI a machine without PgBouncer skips this test; in CI its absence is a failure
// (.ci/run installs it).
const skip = !pgbouncerPresent && !process.env.CI ? `no PgBouncer at ${pgbouncerPath}` : false

describe('behind PgBouncer in transaction mode (DATABASE_POOL_MODE=transaction)', () => {
  test('the contract holds through a real PgBouncer: 200, retry, 40009, 40005, 401, concurrent creates, and a revocation within 1 s', {
    skip,
  }, async () => {
    assert.ok(pgbouncerPresent, `CI needs ${pgbouncerPath} (apt-get install pgbouncer)`)
    const db = await createTestDatabase({ after })
    const name = new URL(db.url).pathname.slice(1)
    // Through the pooler the service cannot send statement_timeout; the database carries it.
    await db.sql.unsafe(`alter database ${name} set statement_timeout = '5s'`)
    const bouncer = await startPgBouncer(db.url, { after })
    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
    const config = parseConfig({
      DATABASE_URL: bouncer.url,
      DATABASE_POOL_MODE: 'transaction',
      DATABASE_DIRECT_URL: db.url,
      PORT: '0',
    })
    const service = await startService(config, log)
    after(() => service.close())
    assert.ok(!lines.some((l) => String(l.message).startsWith('statement_timeout is')))
    const tokenName = `bouncer-${uniqueId()}`
    const token = await tokenFor(db.sql, service.url, tokenName)
    const post = (body: unknown, bearer = token) =>
      fetch(`${service.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })

    const id = uniqueId()
    assert.equal((await post({ id, name: 'Pooled fern', tag: 'pgbouncer' })).status, 200)
    assert.equal((await post({ id, name: 'Pooled fern', tag: 'pgbouncer' })).status, 200)
    const conflict = await post({ id, name: 'Other' })
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)
    const invalid = await post({ id: 'x', name: '' })
    assert.equal(((await invalid.json()) as { error: number }).error, 40005)
    assert.equal((await post({ id: uniqueId(), name: 'x' }, 'pst_unknown')).status, 401)
    // Rounds of concurrent creates spread the pool's statements over PgBouncer's two server
    // connections: a prepared statement would meet a server connection that never saw it.
    const ids: number[] = []
    const statuses: number[] = []
    for (let round = 0; round < 6; round++) {
      const batch = Array.from({ length: 50 }, () => uniqueId())
      ids.push(...batch)
      statuses.push(
        ...(await Promise.all(
          batch.map(async (i) => (await post({ id: i, name: `many ${i}` })).status),
        )),
      )
    }
    assert.deepEqual(new Set(statuses), new Set([200]))
    const [{ count }] =
      (await db.sql`select count(*)::int as count from plants where id = any(${ids.map(String)}::int8[])`) as unknown as [
        { count: number },
      ]
    assert.equal(count, 300)

    // The statements went through PgBouncer: its own statistics count them.
    const admin = postgres(`postgres://${bouncer.user}@127.0.0.1:${bouncer.port}/pgbouncer`, {
      max: 1,
      prepare: false,
      fetch_types: false,
      onnotice: () => {},
    })
    after(() => admin.end({ timeout: 1 }))
    const stats = await admin.unsafe('SHOW STATS').simple()
    const mine = (stats as unknown as { database: string; total_xact_count: string }[]).find(
      (r) => r.database === name,
    )
    // Concurrent creates share statements: fewer transactions than creates, but some.
    assert.ok(
      Number(mine?.total_xact_count) > 0,
      `PgBouncer counted ${mine?.total_xact_count} transactions`,
    )

    // A revocation: NOTIFY reaches the LISTEN on the direct connection; the reload goes through
    // the pooler.
    const revoked = Date.now()
    await db.sql`update api_tokens set revoked_at = now() where name = ${tokenName}`
    await within(
      1000,
      async () => (await post({ id: uniqueId(), name: 'after revoke' })).status === 401,
    )
    assert.ok(Date.now() - revoked <= 1500)
  })
})
