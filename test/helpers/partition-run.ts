import assert from 'node:assert/strict'
import type { Sql } from 'postgres'
import { parseConfig } from '../../src/config.ts'
import { limits } from '../../src/limits.ts'
import { createLog } from '../../src/log.ts'
import type { PlantStore } from '../../src/plants/store.ts'
import { startService } from '../../src/service.ts'
import type { Cleanup } from './database.ts'
import { type Drive, driveCreates, lostAcknowledgements } from './drive.ts'
import { type Direction, partition } from './partition.ts'
import { tokenFor } from './process.ts'
import { connect, startPrimaryAndStandby } from './replication.ts'
import { testWarmUp } from './server.ts'
import { sleep, watchStalls } from './wait.ts'

// A partition run and what must hold of it (issue 20): the service under load, a port of the
// database path cut off by iptables for a while, then healed.

/** One probe of `/readyz` or `/healthz`. */
export type Probe = { at: number; answeredAt: number; status: number; message: string }

/** What the service did before, during and after one partition. */
export type Observed = {
  drive: Drive
  readiness: Probe[]
  liveness: Probe[]
  cutAt: number
  healedAt: number
  lost: unknown[]
  peakQueued: number
  /** The longest this process's event loop (the service's and the clients') did not run, ms. */
  stallMs: number
  logs: Record<string, unknown>[]
}

function poll(url: string, into: Probe[], everyMs: number): () => Promise<void> {
  let running = true
  const loop = (async () => {
    while (running) {
      const at = performance.now()
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(30_000) })
        const body = (await res.json()) as { message?: string; status?: string }
        into.push({
          at,
          answeredAt: performance.now(),
          status: res.status,
          message: body.message ?? body.status ?? '',
        })
      } catch (err) {
        into.push({ at, answeredAt: performance.now(), status: 0, message: String(err) })
      }
      await sleep(everyMs)
    }
  })()
  return async () => {
    running = false
    await loop
  }
}

/** A service under test, and the port whose packets a partition drops. */
export type Arranged = {
  readonly base: string
  readonly token: string
  readonly store: PlantStore
  readonly logs: Record<string, unknown>[]
  /** The port cut off: the database's, the pooler's, or the primary's. */
  readonly port: number
  /** Only on this address of the server (the service's way to it), when given. */
  readonly address?: string
  /** A session of the test's own on the database, to look for lost rows. */
  readonly check: Sql
}

/**
 * 8 clients creating fresh ids throughout; the arranged port cut off for `seconds` in
 * `direction`, then healed; 15 s more of creates.
 */
export async function partitioned(
  s: Arranged,
  seconds: number,
  direction: Direction,
  t: Cleanup,
): Promise<Observed> {
  let peakQueued = 0
  const stalls = watchStalls(t)
  const sampler = setInterval(() => {
    peakQueued = Math.max(peakQueued, s.store.load().queued)
  }, 50)
  t.after(() => clearInterval(sampler))
  const readiness: Probe[] = []
  const liveness: Probe[] = []
  const stopReadiness = poll(`${s.base}/readyz`, readiness, 250)
  const stopLiveness = poll(`${s.base}/healthz`, liveness, 1000)
  const drive = driveCreates(s.base, s.token, { concurrency: 8, pauseMs: 50 })

  await sleep(2000)
  const cut = partition(s.port, direction, t, s.address)
  const cutAt = performance.now()
  await sleep(seconds * 1000)
  cut.heal()
  const healedAt = performance.now()
  await sleep(15_000)
  await drive.stop()
  await stopReadiness()
  await stopLiveness()
  clearInterval(sampler)
  const stallMs = stalls()
  const lost = await lostAcknowledgements(s.check, drive.acknowledged)
  return { drive, readiness, liveness, cutAt, healedAt, lost, peakQueued, stallMs, logs: s.logs }
}

/** The figures of a partition, for the test's output: ms from the heal, statuses. */
function figures(o: Observed): string {
  const after = (t: number | undefined) =>
    t === undefined ? 'never' : `${Math.round(t - o.healedAt)} ms`
  const first200 = o.drive.answers
    .filter((a) => a.status === 200 && a.answeredAt > o.healedAt)
    .map((a) => a.answeredAt)
    .sort((a, b) => a - b)[0]
  const lastNot200 = o.drive.answers
    .filter((a) => a.status !== 200 && a.sentAt > o.healedAt)
    .map((a) => a.sentAt)
    .sort((a, b) => b - a)[0]
  const notReady = o.readiness.find((p) => p.answeredAt > o.cutAt && p.status !== 200)
  const ready = o.readiness.find((p) => p.answeredAt > o.healedAt && p.status === 200)
  return [
    `first 200 ${after(first200)} after the heal`,
    `last refused create sent ${after(lastNot200)} after it`,
    `/readyz 503 ${notReady ? Math.round(notReady.answeredAt - o.cutAt) : 'never'} ms after the cut, 200 ${after(ready?.answeredAt)} after the heal`,
    `statuses ${JSON.stringify([...o.drive.statuses])}`,
    `slowest ${Math.round(o.drive.slowestMs)} ms`,
    `the event loop stalled up to ${Math.round(o.stallMs)} ms`,
  ].join('; ')
}

/** Asserts points 1 to 3 of a partition: quick recovery, a truthful readiness, nothing else. */
function assertRecovered(o: Observed): void {
  const { drive, healedAt, cutAt } = o
  const sinceHeal = (t: number) => Math.round(t - healedAt)
  const firstAfterHeal = drive.answers
    .filter((a) => a.status === 200 && a.answeredAt > healedAt)
    .sort((a, b) => a.answeredAt - b.answeredAt)[0]
  assert.ok(firstAfterHeal, 'a create succeeded after the heal')
  assert.ok(
    firstAfterHeal.answeredAt - healedAt < 5000,
    `the first 200 came ${sinceHeal(firstAfterHeal.answeredAt)} ms after the heal`,
  )
  const late = drive.answers.filter((a) => a.sentAt > healedAt + 10_000)
  assert.ok(late.length > 20, `${late.length} creates sent from 10 s after the heal`)
  const notStored = late.filter((a) => a.status !== 200)
  assert.deepEqual(
    notStored.map((a) => `${a.status} sent ${sinceHeal(a.sentAt)} ms after the heal`),
    [],
    'every create sent from 10 s after the heal is 200',
  )

  // Only 200, or 503 with Retry-After, each within the request deadline.
  assert.deepEqual(
    [...drive.statuses.keys()].filter((s) => s !== 200 && s !== 503),
    [],
    `statuses: ${JSON.stringify([...drive.statuses])}`,
  )
  assert.ok((drive.statuses.get(503) ?? 0) > 0, 'creates were refused during the partition')
  assert.ok(drive.answers.every((a) => a.status !== 503 || a.retryAfter === '1'))
  const slowest = Math.max(...drive.answers.map((a) => a.answeredAt - a.sentAt))
  // The deadline, plus the answer's way back through a busy event loop, plus the longest the
  // loop (the service's timers and the clients' alike) stood still: in CI three files run at a
  // time on two cores, and stalls of 770 to 1,060 ms were printed there (2026-12-02).
  const stalled = o.stallMs
  assert.ok(
    slowest < limits.database.request + 1500 + stalled,
    `the slowest answer took ${slowest} ms; the event loop stalled up to ${Math.round(stalled)} ms`,
  )
  assert.deepEqual(o.lost, [], 'nothing acknowledged was lost')
  assert.ok(o.peakQueued <= limits.batch.maxQueued, `peak queue ${o.peakQueued}`)

  // Readiness: 503 (with the reason) while nothing can be stored, 200 once creates are.
  const settled = cutAt + limits.database.readiness + 1000
  // Sent once the probe's own deadline has had time to pass, answered before the heal.
  const during = o.readiness.filter((p) => p.at > settled && p.answeredAt < healedAt)
  assert.ok(during.length > 5, `${during.length} readiness probes during the partition`)
  assert.deepEqual(
    during.filter((p) => p.status !== 503).map((p) => `${p.status} at ${sinceHeal(p.at)} ms`),
    [],
    '/readyz is 503 during the partition',
  )
  assert.ok(during.every((p) => p.message.length > 0))
  // README, Limits: /readyz answers within 2 s, the partition included (plus the answer's way
  // back through a busy event loop, and the loop's longest stall: in CI, 3,018 ms with a stall
  // of 767 ms, 2026-12-02).
  const slowestProbe = Math.max(...o.readiness.map((p) => p.answeredAt - p.at))
  assert.ok(
    slowestProbe < limits.database.readiness + 1000 + stalled,
    `the slowest /readyz took ${Math.round(slowestProbe)} ms; the event loop stalled up to ${Math.round(stalled)} ms`,
  )
  const readyAgain = o.readiness.find((p) => p.answeredAt > healedAt && p.status === 200)
  assert.ok(readyAgain, '/readyz is 200 again after the heal')
  assert.ok(
    readyAgain.answeredAt - healedAt < 5000,
    `ready ${sinceHeal(readyAgain.answeredAt)} ms after the heal`,
  )
  // Ready means stored: creates sent a second after /readyz turned 200 are 200.
  const afterReady = drive.answers.filter((a) => a.sentAt > readyAgain.answeredAt + 1000)
  assert.deepEqual(
    afterReady.filter((a) => a.status !== 200).map((a) => `${a.status} at ${sinceHeal(a.sentAt)}`),
    [],
    'creates sent after /readyz said ready are stored',
  )
  assert.ok(
    o.readiness.filter((p) => p.at > readyAgain.answeredAt + 1000).every((p) => p.status === 200),
    'ready stays ready',
  )
  const changes = o.logs.filter((l) => String(l.message).startsWith('readiness:'))
  assert.ok(changes.length >= 2 && changes.length <= 6, JSON.stringify(changes))
  // Liveness stays 200: the process recovers on its own and must not be restarted.
  assert.ok(o.liveness.length > 10)
  assert.ok(o.liveness.every((p) => p.status === 200))
}

/** The service's own log lines (not the request lines), for a failed run's output. */
function explain(o: Observed): string {
  return o.logs
    .filter((l) => l.requestId === undefined)
    .map(
      (l) => `${l.time} ${l.level} ${l.message}${l.sockets === undefined ? '' : ` (${l.sockets})`}`,
    )
    .join('\n')
}

/**
 * Runs one partition on the arranged service and asserts points 1 to 3 of it; the figures go to
 * the test's output, and on a failure the service's own log lines too.
 */
export async function partitionAndRecover(
  t: Cleanup & { diagnostic: (message: string) => void },
  arranged: Arranged,
  seconds: number,
  direction: Direction,
): Promise<void> {
  const observed = await partitioned(arranged, seconds, direction, t)
  t.diagnostic(figures(observed))
  try {
    assertRecovered(observed)
  } catch (err) {
    t.diagnostic(explain(observed))
    throw err
  }
}

/**
 * The service in this process on `url` (with `env`), its log lines kept, with the tests' short
 * warm-up: the default 10,000 creates, through PgBouncer beside a loaded machine's other files,
 * took the PgBouncer partition test past its 120 s (2026-12-02).
 */
export async function serviceOn(url: string, env: Record<string, string>, t: Cleanup) {
  const logs: Record<string, unknown>[] = []
  const log = createLog('debug', (l) => logs.push(JSON.parse(l) as Record<string, unknown>))
  const service = await startService(parseConfig({ DATABASE_URL: url, PORT: '0', ...env }), log, {
    warmUp: testWarmUp,
  })
  t.after(() => service.close(0))
  return { service, logs }
}

/**
 * The service on a URL listing a primary and its standby; its way to the primary (on 127.0.0.2)
 * is the one cut, while replication (on 127.0.0.1) goes on. With `tls`, both servers take TLS
 * and the URL asks for it (`sslmode=require`: this process's CA list is fixed, so the test CA
 * cannot be trusted here).
 */
export async function onFailoverUrl(t: Cleanup, { tls = false } = {}): Promise<Arranged> {
  const { primary, standby } = await startPrimaryAndStandby(t, { tls })
  const hosts = `127.0.0.2:${primary.port},127.0.0.1:${standby.port}`
  const { service, logs } = await serviceOn(
    `postgres://postgres@${hosts}/plants?target_session_attrs=read-write${tls ? '&sslmode=require' : ''}`,
    {},
    t,
  )
  const check = connect(primary.port)
  t.after(() => check.end({ timeout: 1 }))
  const token = await tokenFor(check, service.url, 'partition-failover')
  return {
    base: service.url,
    token,
    store: service.store,
    logs,
    port: primary.port,
    address: '127.0.0.2',
    check,
  }
}
