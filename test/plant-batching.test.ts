import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import type { Sql } from 'postgres'
import { openStatementSlots } from '../src/db/reach/slots.ts'
import { limits as contractLimits } from '../src/limits.ts'
import { type CreateOutcome, type StoredOutcome, storeBatch } from '../src/plants/batch-sql.ts'
import type { BatchLimits } from '../src/plants/batcher.ts'
import type { NewPlant } from '../src/plants/schema.ts'
import { batchOnSlots } from '../src/plants/slot-batching.ts'
import type { PlantStore } from '../src/plants/store.ts'
import {
  createTestDatabase,
  insertsRunning,
  quietLog,
  type TestDatabase,
} from './helpers/database.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { startTcpProxy } from './helpers/tcp-proxy.ts'
import { within } from './helpers/wait.ts'

const db = await createTestDatabase({ after })

function storeOn(
  url: string,
  limits: BatchLimits = contractLimits.batch,
): Pick<PlantStore, 'create' | 'probe' | 'load'> {
  const slots = openStatementSlots(url, quietLog, limits.maxInFlight)
  after(() => Promise.all(slots.map((slot) => slot.end())))
  return batchOnSlots(slots, limits, () => ({ shape: 'unnest' }))
}

const plant = (id: bigint, name: string, tag?: string): NewPlant =>
  tag === undefined ? { id, name } : { id, name, tag }

/** Calls create for every plant in one tick, so that they are queued, and sent, together. */
async function together(
  store: Pick<PlantStore, 'create' | 'load'>,
  plants: NewPlant[],
): Promise<PromiseSettledResult<CreateOutcome>[]> {
  const pending = plants.map((p) => store.create(p, 'batch-test'))
  assert.equal(store.load().queued, plants.length, 'queued together')
  return Promise.allSettled(pending)
}

async function transactionsOf(d: TestDatabase, ids: bigint[]): Promise<number> {
  const rows =
    await d.sql`select distinct xmin::text from plants where id = any(${ids.map(String)}::int8[])`
  return rows.length
}

const summary = (r: PromiseSettledResult<CreateOutcome>) =>
  r.status === 'rejected' ? 'rejected' : r.value.kind

describe('batched creates: one statement, each request its own outcome', () => {
  const store = storeOn(db.url)

  test('creates queued together are stored by one transaction, each answered created', async () => {
    const ids = Array.from({ length: 20 }, () => BigInt(uniqueId()))
    const results = await together(
      store,
      ids.map((id, i) => plant(id, `plant ${i}`, i % 2 ? 'odd' : undefined)),
    )
    assert.deepEqual(results.map(summary), Array(20).fill('created'))
    assert.equal(await transactionsOf(db, ids), 1)
    const rows = await db.sql`select name, tag from plants where id = ${String(ids[1])}::int8`
    assert.deepEqual({ ...rows[0] }, { name: 'plant 1', tag: 'odd' })
  })

  test('duplicates within one batch: the first is created, an identical one is a retry, a different one a conflict', async () => {
    const id = BigInt(uniqueId())
    const results = await together(store, [
      plant(id, 'Fern', 'f'),
      plant(id, 'Fern', 'f'),
      plant(id, 'Moss'),
      plant(id, 'Fern', 'f'),
    ])
    assert.deepEqual(results.map(summary), ['created', 'retry', 'conflict', 'retry'])
    const rows = await db.sql`select name, tag from plants where id = ${String(id)}::int8`
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      [{ name: 'Fern', tag: 'f' }],
    )
  })

  test('a retry and a conflict of stored plants in the same batch as new ones', async () => {
    const [a, b, c] = [BigInt(uniqueId()), BigInt(uniqueId()), BigInt(uniqueId())]
    await together(store, [plant(a, 'Aloe'), plant(b, 'Basil', 'herb')])
    const results = await together(store, [
      plant(a, 'Aloe'),
      plant(b, 'Basil', 'spice'),
      plant(c, 'Cactus'),
    ])
    assert.deepEqual(results.map(summary), ['retry', 'conflict', 'created'])
    const ok = results[0]
    assert.ok(ok?.status === 'fulfilled' && ok.value.kind === 'retry')
    assert.deepEqual(ok.value.plant, { name: 'Aloe' })
    const conflict = results[1]
    assert.ok(conflict?.status === 'fulfilled' && conflict.value.kind === 'conflict')
    assert.equal(conflict.value.id, b)
  })

  test('a database error on one row of a batch fails only that create; the others are stored', async () => {
    const d = await createTestDatabase({ after })
    await d.sql.unsafe(`
      create function refuse() returns trigger language plpgsql as $$ begin raise exception 'refused'; end $$;
      create trigger refuse before insert on plants for each row when (new.name = 'bad') execute function refuse();`)
    const s = storeOn(d.url)
    const ids = [BigInt(uniqueId()), BigInt(uniqueId()), BigInt(uniqueId())]
    const results = await together(s, [
      plant(ids[0] ?? 0n, 'good'),
      plant(ids[1] ?? 0n, 'bad'),
      plant(ids[2] ?? 0n, 'also good'),
    ])
    // A fault, not unavailability: answered 500 by the handler.
    assert.deepEqual(results.map(summary), ['created', 'fault', 'created'])
    const bad = results[1]
    assert.ok(bad?.status === 'fulfilled' && bad.value.kind === 'fault')
    assert.match(String(bad.value.error), /refused/)
    const rows = await d.sql`select name from plants order by name`
    assert.deepEqual(
      rows.map((r) => r.name),
      ['also good', 'good'],
    )
  })

  test('a stored plant deleted between the insert and the read of stored rows is created again on its own', async () => {
    const [gone, fresh] = [BigInt(uniqueId()), BigInt(uniqueId())]
    await db.sql`insert into plants (id, name, created_by) values (${String(gone)}, 'Fern', 'batch-test')`
    // The insert meets the stored row and leaves it; it is deleted before the read of stored rows.
    const send = db.sql as unknown as (s: TemplateStringsArray, ...v: unknown[]) => Promise<unknown>
    let deleted = false
    const sql = ((strings: TemplateStringsArray, ...values: unknown[]) => {
      if (deleted || !strings[0]?.includes('select id::text')) return send(strings, ...values)
      deleted = true
      return db.sql`delete from plants where id = ${String(gone)}`.then(() =>
        send(strings, ...values),
      )
    }) as unknown as Sql
    const outcomes = await storeBatch(
      sql,
      [
        { plant: plant(gone, 'Fern'), createdBy: 'batch-test' },
        { plant: plant(fresh, 'Moss'), createdBy: 'batch-test' },
      ],
      { shape: 'unnest' },
    )
    assert.ok(deleted, 'the stored row was read for, after its delete')
    assert.deepEqual(outcomes, [
      { kind: 'created', plant: { name: 'Fern' } },
      { kind: 'created', plant: { name: 'Moss' } },
    ])
    const rows =
      await db.sql`select name from plants where id in (${String(gone)}, ${String(fresh)}) order by name`
    assert.deepEqual(
      rows.map((r) => r.name),
      ['Fern', 'Moss'],
    )
  })

  test('over the queue limit a create is refused at once as unavailable', async () => {
    const s = storeOn(db.url, { maxBatch: 10, maxInFlight: 1, maxQueued: 3 })
    const pending = [1, 2, 3].map(() => s.create(plant(BigInt(uniqueId()), 'queued'), 'batch-test'))
    const refused = await s.create(plant(BigInt(uniqueId()), 'one too many'), 'batch-test')
    assert.ok(refused.kind === 'unavailable' && refused.reason === 'queue_full', refused.kind)
    assert.deepEqual(
      (await Promise.all(pending)).map((o) => o.kind),
      ['created', 'created', 'created'],
    )
  })
})

describe('a create given no deadline', () => {
  test('has a request’s deadline: with the database refusing connections it is answered unavailable within it, never held for ever', async () => {
    const { freePort } = await import('../src/db/start/embedded.ts')
    // A port nobody listens on: every connection is refused, a reason to hold and send again.
    const refusing = `postgres://nobody@127.0.0.1:${await freePort()}/plants`
    const s = storeOn(refusing)
    const started = performance.now()
    const deadline = contractLimits.database.request - contractLimits.database.answerMargin
    let timer: NodeJS.Timeout | undefined
    const ended = await Promise.race([
      s.create(plant(BigInt(uniqueId()), 'no deadline'), 'batch-test'),
      new Promise((resolve) => {
        timer = setTimeout(resolve, deadline + 5_000, 'still held')
      }),
    ])
    clearTimeout(timer)
    const ms = performance.now() - started
    assert.ok(
      typeof ended === 'object' &&
        ended !== null &&
        'kind' in ended &&
        ended.kind === 'unavailable',
      `ended as ${JSON.stringify(ended)}`,
    )
    assert.ok(ms >= deadline - 50 && ms < deadline + 1_000, `answered after ${Math.round(ms)} ms`)
  })
})

describe('a batch cut by a lost connection', () => {
  test('every request in it gets 503, and its rows are all there or none is; a retry then gets 200', async () => {
    const d = await createTestDatabase({ after })
    const proxy = await startTcpProxy(d.url)
    after(() => proxy.close())
    const s = await startTestServer({ after }, { db: d, connectTo: () => proxy.url })
    const ids = Array.from({ length: 8 }, () => uniqueId())
    let responses: Response[] = []
    await d.sql.begin(async (tx) => {
      // The lock holds the batch in flight; the proxy then drops its connection.
      await tx`lock table plants in share row exclusive mode`
      const sent = ids.map((id) => s.post({ id, name: `cut ${id}` }))
      await within(5000, async () => (await insertsRunning(d.sql, 'Lock')) > 0)
      await proxy.cut()
      responses = await Promise.all(sent)
    })
    assert.deepEqual(
      responses.map((r) => r.status),
      Array(8).fill(503),
    )
    for (const r of responses) assert.equal(r.headers.get('retry-after'), '1')
    // The server may still commit the statement after the client was gone: all or none, once it
    // has ended.
    await within(5000, async () => (await insertsRunning(d.sql)) === 0)
    const stored =
      await d.sql`select id::text, name from plants where id = any(${ids.map(String)}::int8[])`
    assert.ok(
      stored.length === 0 || stored.length === ids.length,
      `${stored.length} of ${ids.length} rows`,
    )
    for (const row of stored) assert.equal(row.name, `cut ${row.id}`)

    await proxy.restore()
    for (const id of ids) {
      await within(5000, async () => (await s.post({ id, name: `cut ${id}` })).status === 200)
    }
    assert.equal(
      (await d.sql`select 1 from plants where id = any(${ids.map(String)}::int8[])`).length,
      ids.length,
    )
  })
})

describe('the statements of a batch on a connection', () => {
  test("the insert is planned once, not at each statement, and a retry's read of the stored row goes by the index after the table grew from empty", async () => {
    const own = await createTestDatabase({ after })
    const [slot] = openStatementSlots(own.url, quietLog, 1)
    if (slot === undefined) throw new Error('no slot')
    after(() => slot.end())
    const sql = slot.forStatement()
    const path = { shape: 'unnest' } as const
    const row = (id: number) => ({ plant: plant(BigInt(id), `p${id}`), createdBy: 'plans' })
    const kindOf = (o: StoredOutcome | Error) => (o instanceof Error ? o.message : o.kind)
    // On the empty table: ten creates, then ten retries of them (each read back).
    for (let id = 1; id <= 10; id++) await storeBatch(sql, [row(id)], path)
    const kinds: string[] = []
    for (let id = 1; id <= 10; id++)
      for (const o of await storeBatch(sql, [row(id)], path)) kinds.push(kindOf(o))
    assert.deepEqual(kinds, Array(10).fill('retry'))
    const plans = async () => {
      const rows = await sql<{ statement: string; generic: number; custom: number }[]>`
        select statement, generic_plans::int as generic, custom_plans::int as custom
        from pg_prepared_statements`
      const of = (text: string) => rows.find((r) => r.statement.includes(text))
      return { insert: of('insert into plants'), read: of('from plants where id = any') }
    }
    const before = await plans()
    assert.ok(before.insert && before.read, 'both statements prepared on the connection')
    assert.ok(
      before.insert.generic >= 10 && before.insert.custom <= 6,
      `the insert planned at each statement: ${JSON.stringify(before.insert)}`,
    )

    // The table grows far past what it was planned on, with no ANALYZE in between.
    await own.sql`insert into plants (id, name, created_by)
      select g, 'grown', 'plans' from generate_series(1000, 200999) g`
    const scans = async () => {
      const [r] = await own.sql<{ seq: number; idx: number }[]>`
        select seq_scan::int as seq, coalesce(idx_scan, 0)::int as idx
        from pg_stat_user_tables where relname = 'plants'`
      return r ?? { seq: 0, idx: 0 }
    }
    await sql`select pg_stat_force_next_flush()`
    let start = { seq: 0, idx: 0 }
    await within(5000, async () => {
      start = await scans()
      return start.idx >= 10
    })
    const outcomes = await storeBatch(sql, [row(1000), row(5)], path)
    assert.deepEqual(outcomes.map(kindOf), ['conflict', 'retry'])
    await sql`select pg_stat_force_next_flush()`
    let end = start
    await within(5000, async () => {
      end = await scans()
      return end.idx > start.idx
    })
    assert.equal(end.seq, start.seq, 'the read of stored ids scanned the whole table')
  })
})
