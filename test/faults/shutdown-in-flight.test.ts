import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createTestDatabase, holdPlantsLock } from '../helpers/database.ts'
import { startServiceProcess, tokenFor } from '../helpers/process.ts'
import { sleep } from '../helpers/wait.ts'

describe('shutdown with requests in flight', () => {
  test('SIGTERM with 50 creates in flight: all complete with full responses, exit 0 within 10 s, every row whole', async () => {
    const db = await createTestDatabase({ after })
    const service = await startServiceProcess('node', { DATABASE_URL: db.url }, { after })
    const token = await tokenFor(db.sql, service.base, 'shutdown')
    const ids = Array.from({ length: 50 }, (_, i) => 5_000_000 + i)

    // A lock held on a connection of the test's own keeps all 50 in flight past the signal.
    const unlock = await holdPlantsLock(db.sql)
    const sent = ids.map(async (id) => {
      const res = await fetch(`${service.base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id, name: `in flight ${id}`, tag: 'shutdown' }),
      })
      return { status: res.status, body: (await res.json()) as unknown }
    })
    await sleep(500)
    service.child.kill('SIGTERM')
    const signalled = performance.now()
    await sleep(500)
    await unlock()

    const responses = await Promise.all(sent)
    assert.deepEqual(
      responses.map((r) => r.status),
      Array(50).fill(200),
    )
    responses.forEach((r, i) => {
      assert.deepEqual(r.body, { name: `in flight ${ids[i]}`, tag: 'shutdown' })
    })
    assert.equal(await service.exited, 0)
    assert.ok(
      performance.now() - signalled < 10_000,
      `exited ${performance.now() - signalled} ms after SIGTERM`,
    )
    const rows =
      await db.sql`select id::int, name, tag from plants where id = any(${ids}::int8[]) order by id`
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      ids.map((id) => ({ id, name: `in flight ${id}`, tag: 'shutdown' })),
    )
  })
})
