import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { tokenDigest } from '../src/auth/tokens.ts'
import { freePort } from '../src/db/start/embedded.ts'
import { shared } from '../src/metrics/cluster.ts'
import { holdPlantsLock } from './helpers/database.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

/** The value of one series in an exposition, e.g. `plant_store_creates_total{outcome="created"}`. */
function seriesValue(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  assert.ok(line, `${series} is missing`)
  return Number(line.slice(series.length + 1))
}

async function scrape(base: string): Promise<string> {
  const res = await fetch(`${base}/metrics`)
  assert.equal(res.status, 200)
  return res.text()
}

describe('GET /metrics (Prometheus text exposition)', () => {
  test('is served without a token, as Prometheus text, never cached, HEAD too', async () => {
    const s = await startTestServer({ after })
    const res = await fetch(`${s.base}/metrics`)
    assert.equal(res.status, 200)
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/)
    assert.equal(res.headers.get('cache-control'), 'no-store')
    const text = await res.text()
    assert.match(text, /^# HELP /m)
    assert.match(
      text,
      /^plant_store_build_info\{version="1\.0\.0",runtime="node",runtime_version="[\d.]+"\} 1$/m,
    )
    for (const name of [
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
      'nodejs_gc_duration_seconds',
      'nodejs_active_handles',
      'process_cpu_seconds_total',
    ])
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), name)
    const head = await fetch(`${s.base}/metrics`, { method: 'HEAD' })
    assert.equal(head.status, 200)
    assert.equal((await head.arrayBuffer()).byteLength, 0)
  })

  test('creates move the counter of their outcome; each batch statement is observed', async () => {
    const s = await startTestServer({ after })
    const before = await scrape(s.base)
    const id = uniqueId()
    assert.equal((await s.post({ id, name: 'counted' })).status, 200)
    assert.equal((await s.post({ id, name: 'counted' })).status, 200)
    assert.equal((await s.post({ id, name: 'other' })).status, 400)
    assert.equal((await s.post({ id: 1.5, name: 'x' })).status, 400)
    assert.equal((await s.post('{')).status, 400)
    assert.equal((await s.post({ id, name: 'x' }, { token: 'pst_unknown' })).status, 401)
    const text = await scrape(s.base)
    // A series appears with its first event; before it, it counts as 0.
    const moved = (series: string) =>
      seriesValue(text, series) -
      (before.includes(`\n${series} `) ? seriesValue(before, series) : 0)
    assert.equal(moved('plant_store_creates_total{outcome="created"}'), 1)
    assert.equal(moved('plant_store_creates_total{outcome="retry"}'), 1)
    assert.equal(moved('plant_store_creates_total{outcome="conflict"}'), 1)
    assert.equal(moved('plant_store_creates_total{outcome="invalid"}'), 2, 'a 401 is no create')
    assert.equal(moved('plant_store_creates_total{outcome="unavailable"}'), 0)
    assert.equal(moved('plant_store_create_batch_rows_count'), 3)
    assert.equal(moved('plant_store_create_batch_rows_sum'), 3)
    assert.equal(moved('plant_store_create_statement_duration_seconds_count'), 3)
    assert.equal(
      moved('plant_store_http_requests_total{method="POST",route="/plants",status="400"}'),
      3,
    )
    assert.equal(
      moved('plant_store_http_requests_total{method="POST",route="/plants",status="401"}'),
      1,
    )
  })

  test('creates that arrive while statements wait share statements: the rows histogram counts more rows than statements', async () => {
    const s = await startTestServer({ after })
    // The table held, so that the first statements wait and the creates behind them queue
    // however slowly this process sends them (with a core busy elsewhere they can trickle in
    // one at a time, each finding a slot free); released once most of them wait.
    const release = await holdPlantsLock(s.db.sql)
    const answers = Promise.all(
      Array.from({ length: 200 }, () => s.post({ id: uniqueId(), name: 'together' })),
    )
    try {
      await within(20_000, () => s.store.load().queued >= 150)
    } finally {
      await release()
    }
    for (const res of await answers) assert.equal(res.status, 200)
    const text = await scrape(s.base)
    const rows = seriesValue(text, 'plant_store_create_batch_rows_sum')
    const statements = seriesValue(text, 'plant_store_create_batch_rows_count')
    assert.equal(rows, 200)
    assert.ok(statements < rows, `${statements} statements for ${rows} rows`)
  })

  test('routes are labelled by pattern: every unknown path is one series', async () => {
    const s = await startTestServer({ after })
    for (const path of ['/nowhere', '/plants/', `/x/${uniqueId()}`])
      await (await fetch(`${s.base}${path}`)).arrayBuffer()
    await (await fetch(`${s.base}/plants`)).arrayBuffer()
    const text = await scrape(s.base)
    assert.equal(
      seriesValue(
        text,
        'plant_store_http_requests_total{method="GET",route="unmatched",status="404"}',
      ),
      3,
    )
    assert.equal(
      seriesValue(
        text,
        'plant_store_http_requests_total{method="GET",route="/plants",status="405"}',
      ),
      1,
    )
    assert.doesNotMatch(text, /route="\/(nowhere|x\/)/)
  })

  test('a full queue is counted as unavailable, with its reason', async () => {
    const s = await startTestServer(
      { after },
      { batchLimits: { maxBatch: 10, maxInFlight: 1, maxQueued: 0 } },
    )
    const res = await s.post({ id: uniqueId(), name: 'refused' })
    assert.equal(res.status, 503)
    const text = await scrape(s.base)
    assert.equal(seriesValue(text, 'plant_store_creates_total{outcome="unavailable"}'), 1)
    assert.equal(
      seriesValue(text, 'plant_store_database_unavailable_total{reason="queue_full"}'),
      1,
    )
  })

  test('the token cache: how many tokens are valid and how old its last reload is, never a token or digest', async () => {
    const s = await startTestServer({ after })
    const second = await s.newToken(`metrics-${uniqueId()}`)
    const text = await scrape(s.base)
    const [{ count }] = (await s.db
      .sql`select count(*)::int as count from api_tokens where revoked_at is null`) as unknown as [
      { count: number },
    ]
    assert.equal(seriesValue(text, 'plant_store_token_cache_tokens'), count)
    const age = seriesValue(text, 'plant_store_token_cache_age_seconds')
    assert.ok(age >= 0 && age < 30, `age ${age}`)
    for (const token of [s.token, second]) {
      assert.ok(!text.includes(token))
      assert.ok(!text.includes(tokenDigest(token).toString('hex')))
    }
  })

  test('the pool counts the connections it lost', async () => {
    const s = await startTestServer({ after })
    await s.post({ id: uniqueId(), name: 'connect' })
    const series = 'plant_store_database_connections_closed_total'
    const before = seriesValue(await scrape(s.base), series)
    const name = new URL(s.db.url).pathname.slice(1)
    const [{ ended }] = (await s.db.sql`
      select count(*)::int as ended from (
        select pg_terminate_backend(pid) from pg_stat_activity
        where datname = ${name} and application_name = 'plant-store'
      ) t`) as unknown as [{ ended: number }]
    assert.ok(ended >= 1)
    // The pool reconnects and the create succeeds.
    await within(5000, async () => (await s.post({ id: uniqueId(), name: 'again' })).status === 200)
    assert.ok(seriesValue(await scrape(s.base), series) >= before + 1)
  })

  test('METRICS=off: no /metrics (40401), and the API answers as before', async () => {
    const s = await startTestServer({ after }, { env: { METRICS: 'off' } })
    const res = await fetch(`${s.base}/metrics`)
    assert.equal(res.status, 404)
    assert.equal(((await res.json()) as { error: number }).error, 40401)
    assert.equal((await s.post({ id: uniqueId(), name: 'no metrics' })).status, 200)
  })

  test('shared(): callers that come while a collection runs get its result; the next call collects anew', async () => {
    let collections = 0
    let release = () => {}
    const collect = shared(async () => {
      collections++
      await new Promise<void>((r) => {
        release = r
      })
      return collections
    })
    const waiting = Array.from({ length: 10 }, () => collect())
    release()
    assert.deepEqual(await Promise.all(waiting), Array(10).fill(1))
    const next = collect()
    release()
    assert.equal(await next, 2)
  })

  test('METRICS_PORT: /metrics moves to a port of its own on 127.0.0.1, and the service port answers it 404', async () => {
    const port = await freePort()
    const s = await startTestServer({ after }, { env: { METRICS_PORT: String(port) } })
    const moved = await fetch(`${s.base}/metrics`)
    assert.equal(moved.status, 404)
    await moved.arrayBuffer()
    assert.ok(
      s.logs.some(
        (l) => l.message === 'metrics served' && l.url === `http://127.0.0.1:${port}/metrics`,
      ),
    )
    await s.post({ id: uniqueId(), name: 'counted elsewhere' })
    const text = await scrape(`http://127.0.0.1:${port}`)
    assert.ok(seriesValue(text, 'plant_store_creates_total{outcome="created"}') >= 1)
    const other = await fetch(`http://127.0.0.1:${port}/plants`, { method: 'POST' })
    assert.equal(other.status, 404)
    await other.arrayBuffer()
  })
})
