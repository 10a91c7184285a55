import assert from 'node:assert/strict'
import { test } from 'node:test'
import { limits } from '../src/limits.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'

// A new instance pays what its first creates would (connections, prepared statements, code not
// yet compiled) before it listens: the service's own warm-up, `limits.warmUp`.

test('a new instance has every statement slot connected before its first create', async (t) => {
  const server = await startTestServer(t, { warmUp: limits.warmUp })
  // Each slot's session has run the batch's statements: the warm-up's last is a read of rows
  // sent as arrays, as a batch's insert sends them.
  const sessions = await server.db.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and application_name = 'plant-store'
      and query like '%from unnest(%'`
  assert.equal(sessions[0]?.n, limits.batch.maxInFlight)
  const res = await server.post({ id: uniqueId(), name: 'first after the warm-up' })
  assert.equal(res.status, 200)
})

test('a new instance accepts as many connections at once as a balancer opens before it listens, each with a create', async (t) => {
  const server = await startTestServer(t, { warmUp: { creates: 300, statements: 2 } })
  const warmed = server.logs.find(
    (l) => l.message === 'warmed up through a private copy of the service',
  )
  assert.equal(typeof warmed?.connectionsAtOnce, 'number')
  assert.equal(warmed?.connectionsAtOnce, limits.warmUp.atOnce)
  assert.equal(warmed?.creates, 300)
})

test('MAX_CONNECTIONS bounds the connections the warm-up opens at once to half of it, both ends being the process', async (t) => {
  const server = await startTestServer(t, {
    env: { WARM_UP_CREATES: '100', MAX_CONNECTIONS: '40' },
    warmUp: 'setting',
  })
  const warmed = server.logs.find(
    (l) => l.message === 'warmed up through a private copy of the service',
  )
  assert.equal(warmed?.connectionsAtOnce, 20)
  assert.equal(warmed?.creates, 100)
})

test('the warm-up stores nothing, counts no request and logs no access line', async (t) => {
  const server = await startTestServer(t, { warmUp: limits.warmUp })
  const [rows] = await server.db.sql<{ n: number }[]>`select count(*)::int as n from plants`
  assert.equal(rows?.n, 0)
  const warmed = server.logs.find(
    (l) => l.message === 'warmed up through a private copy of the service',
  )
  assert.ok(warmed, 'a line says the instance warmed up')
  assert.equal(warmed.creates, limits.warmUp.creates)
  assert.equal(typeof warmed.ms, 'number')
  assert.equal(
    server.logs.filter((l) => l.message === 'request').length,
    0,
    'no access line before the first request',
  )
  const metrics = await (await fetch(`${server.base}/metrics`)).text()
  assert.doesNotMatch(metrics, /^plant_store_http_requests_total\{[^}]*route="\/plants"/m)
  assert.match(metrics, /^plant_store_create_batch_rows_count 0$/m)
})

test('WARM_UP_CREATES sets how many creates warm a new instance up; 0 warms none, yet connects every statement slot', async (t) => {
  const some = await startTestServer(t, { env: { WARM_UP_CREATES: '50' }, warmUp: 'setting' })
  const warmed = some.logs.find(
    (l) => l.message === 'warmed up through a private copy of the service',
  )
  assert.equal(warmed?.creates, 50)
  const none = await startTestServer(t, { env: { WARM_UP_CREATES: '0' }, warmUp: 'setting' })
  assert.ok(
    !none.logs.some((l) => String(l.message).startsWith('warmed up')),
    'no creates through the private copy',
  )
  // Each slot has run the batch's statements, the last a read of stored rows, or the check for
  // room on the disk, which comes after them on one slot.
  const sessions = await none.db.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and application_name = 'plant-store'
      and (query like '%from plants where id = any(%' or query like '%plant_store_room%')`
  assert.equal(sessions[0]?.n, limits.batch.maxInFlight)
  assert.equal((await none.post({ id: uniqueId(), name: 'first, unwarmed' })).status, 200)
})
