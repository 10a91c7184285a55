import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { freePort, startEmbedded } from '../../src/db/start/embedded.ts'
import { migrate } from '../../src/db/start/migrate.ts'
import { limits } from '../../src/limits.ts'
import { seedEmbedded } from '../helpers/cluster-cache.ts'
import { holdPlantsLock, quietLog } from '../helpers/database.ts'
import { driveCreates, lostAcknowledgements, underWay } from '../helpers/drive.ts'
import { startTestServer, uniqueId } from '../helpers/server.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { sleep, within } from '../helpers/wait.ts'

describe('a database outage', () => {
  test('PostgreSQL stopped for longer than the deadline under load: 503s with Retry-After at the deadline, /readyz 503 within 2 s, and 200s again within 5 s of its return', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-outage-')
    const port = await freePort()
    const start = () => startEmbedded({ dir, log: quietLog, shareRunning: false, fast: true, port })
    await seedEmbedded(dir)
    let db = await start()
    tmp.after(() => db.stop())
    await migrate(db.url, quietLog)
    const sql = postgres(db.url, { max: 2, onnotice: () => {} })
    const s = await startTestServer(tmp, { db: { url: db.url, sql } })

    const before = driveCreates(s.base, s.token, { concurrency: 8 })
    await underWay(before)
    await sql.end()
    await db.stop()
    const stoppedAt = performance.now()
    await before.stop()
    const during = driveCreates(s.base, s.token, { concurrency: 8, pauseMs: 20 })
    await sleep(3000)
    const asked = performance.now()
    const ready = await fetch(`${s.base}/readyz`)
    const readyMs = performance.now() - asked
    await during.stop()

    assert.equal(ready.status, 503)
    assert.ok(readyMs <= limits.database.readiness, `/readyz took ${readyMs} ms`)
    assert.equal(((await ready.json()) as { error: number }).error, 50301)
    assert.deepEqual(
      [...during.statuses.keys()],
      [503],
      `statuses during the outage: ${JSON.stringify([...during.statuses])}`,
    )
    assert.equal(before.statuses.get(0) ?? 0, 0, 'no request lost its connection')
    // Each create is held, and sent again, until its deadline: no sooner, no later.
    const took = during.answers.map((a) => a.answeredAt - a.sentAt)
    assert.ok(
      took.every((ms) => ms >= limits.database.request - 1000),
      `a 503 came early: ${Math.round(Math.min(...took))} ms`,
    )
    assert.ok(
      during.slowestMs <= limits.database.request + 500,
      `the slowest 503 took ${during.slowestMs} ms`,
    )
    const refused = await s.post({ id: uniqueId(), name: 'refused' })
    assert.equal(refused.headers.get('retry-after'), '1')
    assert.equal(((await refused.json()) as { error: number }).error, 50301)
    assert.ok(performance.now() - stoppedAt > 0)

    db = await start()
    // A 200 within 5 s of the database coming back.
    await within(5000, async () => (await s.post({ id: uniqueId(), name: 'back' })).status === 200)
    assert.equal((await fetch(`${s.base}/readyz`)).status, 200)
    const check = postgres(db.url, { max: 1, onnotice: () => {} })
    tmp.after(() => check.end())
    assert.deepEqual(await lostAcknowledgements(check, before.acknowledged), [])
  })

  test('a stalled database (a lock held) is answered 503 by the statement timeout, and the waiting queue stays bounded', async () => {
    const maxQueued = 50
    const s = await startTestServer(
      { after },
      { batchLimits: { maxBatch: 100, maxInFlight: 1, maxQueued } },
    )
    let peakQueued = 0
    const sampler = setInterval(() => {
      peakQueued = Math.max(peakQueued, s.store.load().queued)
    }, 5)
    after(() => clearInterval(sampler))
    const ids = Array.from({ length: 400 }, () => uniqueId())
    const statuses: number[] = []
    await s.db.sql.begin(async (tx) => {
      await tx`lock table plants in share row exclusive mode`
      await Promise.all(
        ids.map(async (id) => {
          const res = await s.post(
            { id, name: `stalled ${id}` },
            { headers: { 'x-request-id': `stalled-${id}` } },
          )
          statuses.push(res.status)
          await res.arrayBuffer()
        }),
      )
    })
    clearInterval(sampler)
    assert.ok(peakQueued <= maxQueued, `${peakQueued} creates waited`)
    assert.deepEqual(new Set(statuses), new Set([503]))

    // The service's log tells, per request, why it was answered 503 and how long that took.
    const requests = new Map(
      s.logs.filter((l) => l.message === 'request').map((l) => [String(l.requestId), l]),
    )
    const refusedIds = new Set(
      s.logs
        .filter((l) => l.message === 'request' && /creates are waiting/.test(String(l.reason)))
        .map((l) => String(l.requestId)),
    )
    const refused = ids.filter((id) => refusedIds.has(`stalled-${id}`))
    const waited = ids.filter((id) => !refusedIds.has(`stalled-${id}`))
    const took = (id: number) => Number(requests.get(`stalled-${id}`)?.durationMs)
    // One statement of at most maxBatch rows is stuck and maxQueued creates wait behind it; the
    // rest of the 400 find the queue full for as long as it stays stuck (5 s).
    assert.ok(refused.length > 0, 'no create found the queue full')
    assert.ok(
      refused.every((id) => took(id) < limits.database.statement),
      'a create refused for a full queue waited for the database',
    )
    assert.ok(
      waited.every((id) => took(id) <= limits.database.request + 1000),
      'a waiting create was held past its deadline',
    )
    // The refused ones were never sent, so none of them is stored.
    const stored = await s.db
      .sql`select id::text from plants where id = any(${refused.map(String)}::int8[])`
    assert.deepEqual(
      stored.map((r) => r.id),
      [],
    )
    assert.equal((await s.post({ id: uniqueId(), name: 'after the stall' })).status, 200)
    // A statement merely waiting for a lock is answered by the statement timeout (5 s), before
    // the 6 s after which a statement without an answer has its connection cut loose.
    assert.deepEqual(
      s.logs.filter((l) =>
        String(l.message).startsWith('no answer from the database past the deadlines'),
      ),
      [],
      'a slow statement had its connection cut',
    )
  })

  test('creates still waiting when their requests have been answered 503 are dropped, never sent', async () => {
    const s = await startTestServer(
      { after },
      { batchLimits: { maxBatch: 5, maxInFlight: 1, maxQueued: 100 } },
    )
    const ids = Array.from({ length: 15 }, () => uniqueId())
    const unlock = await holdPlantsLock(s.db.sql)
    // Batch 1 is sent at once and times out at 5 s; batch 2 is sent then and times out at 10 s;
    // by then batch 3 has waited past its 6 s deadline.
    const answers = ids.map(async (id) => (await s.post({ id, name: `waiting ${id}` })).status)
    await sleep(10_500)
    await unlock()
    assert.deepEqual(await Promise.all(answers), Array(15).fill(503))
    await sleep(500)
    const stored = await s.db
      .sql`select id::text from plants where id = any(${ids.map(String)}::int8[])`
    assert.equal(
      stored.length,
      0,
      'a create whose request was answered 503 while it waited was sent later',
    )
  })
})
