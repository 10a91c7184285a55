import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createTestDatabase } from './helpers/database.ts'
import { startServiceProcess, tokenFor } from './helpers/process.ts'

describe('SIGTERM and SIGINT', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    test(`${signal} stops accepting, finishes the request in flight with its row committed, and exits 0`, async () => {
      const db = await createTestDatabase({ after })
      const service = await startServiceProcess('node', { DATABASE_URL: db.url }, { after })
      const token = await tokenFor(db.sql, service.base, 'shutdown')

      let inFlight: Promise<Response> | undefined
      await db.sql.begin(async (tx) => {
        await tx`lock table plants in access exclusive mode`
        inFlight = fetch(`${service.base}/plants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ id: 424242, name: 'in flight' }),
        })
        await new Promise((r) => setTimeout(r, 300))
        service.child.kill(signal)
        await new Promise((r) => setTimeout(r, 300))
        await assert.rejects(
          fetch(`${service.base}/healthz`),
          'a new connection is refused while stopping',
        )
      })
      const res = await inFlight
      assert.equal(res?.status, 200)
      assert.deepEqual(await res?.json(), { name: 'in flight' })
      assert.equal(await service.exited, 0)
      assert.equal((await db.sql`select 1 from plants where id = 424242`).length, 1)
      assert.ok(service.lines.some((l) => l.message === 'stopped'))
    })
  }
})
