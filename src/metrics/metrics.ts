import {
  AggregatorRegistry,
  Counter,
  collectDefaultMetrics,
  Gauge,
  Histogram,
  Registry,
} from 'prom-client'
import { type ResendReason, resendReasons } from '../db/reach/unavailable.ts'
import type { Handler } from '../http/types.ts'
import { formatted, limits } from '../limits.ts'
import { droppedLogLines } from '../log.ts'
import type { UnavailableReason } from '../outcome.ts'
import type { HeldOutcome } from '../plants/waiting.ts'
import { spanCounts } from '../tracing/spans.ts'
import { serviceVersion as version } from '../version.ts'
import { metricsOfAllWorkers, shared } from './cluster.ts'
import { fastCounter, fastHistogram, fastPlainHistogram } from './fast-metric.ts'

/** How a create ended, as the client saw it. */
export type CreateOutcomeLabel = 'created' | 'retry' | 'conflict' | 'invalid' | 'unavailable'

/** Where the gauges read their values when Prometheus scrapes. */
export type MetricSources = {
  readonly queue: () => { queued: number; inFlight: number }
  /** Whether creates are refused now for want of disk space in the database. */
  readonly diskFull: () => boolean
  readonly tokens: () => {
    valid: number
    loadedAt: number | undefined
    /** When each name's current token expires (`Date.now()` ms), for names whose token does. */
    expiries: ReadonlyMap<string, number>
  }
}

/** The service's metrics: what the adapter, the store and the pool report, and `GET /metrics`. */
export type Metrics = {
  readonly requestAnswered: (method: string, route: string, status: number, seconds: number) => void
  readonly createAnswered: (outcome: CreateOutcomeLabel) => void
  readonly statementRan: (rows: number, seconds: number) => void
  readonly unavailable: (reason: UnavailableReason) => void
  readonly connectionClosed: () => void
  /** Creates of a statement that failed for want of a database, sent again (plants/gaps.ts). */
  readonly createsResent: (reason: ResendReason, creates: number) => void
  /** A held create's answer, `seconds` after its first statement failed. */
  readonly heldCreateEnded: (outcome: HeldOutcome, seconds: number) => void
  readonly watch: (sources: MetricSources) => void
  /** `GET /metrics`: the Prometheus text exposition; `undefined` when metrics are off. */
  readonly handler: Handler | undefined
}

const nothing = () => {}

/** Metrics turned off (METRICS=off): every report is a no-op and there is no `/metrics`. */
export const noMetrics: Metrics = Object.freeze({
  requestAnswered: nothing,
  createAnswered: nothing,
  statementRan: nothing,
  unavailable: nothing,
  connectionClosed: nothing,
  createsResent: nothing,
  heldCreateEnded: nothing,
  watch: nothing,
  handler: undefined,
})

const createOutcomes: readonly CreateOutcomeLabel[] = [
  'created',
  'retry',
  'conflict',
  'invalid',
  'unavailable',
]
const unavailableReasons: readonly UnavailableReason[] = ['queue_full', 'deadline', 'database']

function runtime(): { runtime: string; runtime_version: string } {
  const deno = (globalThis as { Deno?: { version: { deno: string } } }).Deno
  return deno
    ? { runtime: 'deno', runtime_version: deno.version.deno }
    : { runtime: 'node', runtime_version: process.versions.node }
}

/** A registry of its own with Node's default process metrics (event-loop lag, heap, GC, handles). */
function serviceRegistry(clusterWorker: boolean): Registry {
  const registry = new Registry()
  if (clusterWorker) {
    // The primary asks each worker for this registry (prom-client's cluster support).
    AggregatorRegistry.setRegistries(registry)
    new AggregatorRegistry()
  }
  collectDefaultMetrics({ register: registry })
  // These three gauges break the naming rule promtool checks (_total is for counters); the same
  // numbers remain, by type, in nodejs_active_handles, _requests and _resources: sum() them.
  for (const name of [
    'nodejs_active_handles_total',
    'nodejs_active_requests_total',
    'nodejs_active_resources_total',
  ])
    registry.removeSingleMetric(name)
  new Gauge({
    name: 'plant_store_build_info',
    help: 'Always 1; the labels name the service version and the runtime',
    labelNames: ['version', 'runtime', 'runtime_version'],
    registers: [registry],
    aggregator: 'first',
  }).set({ version, ...runtime() }, 1)
  return registry
}

/** The two metrics updated on every request, kept cheap (see fast-metric.ts). */
function httpMetrics(registry: Registry): Metrics['requestAnswered'] {
  const requests = fastCounter(
    'plant_store_http_requests_total',
    'HTTP requests answered, by method, route pattern (unmatched for an unknown path) and status',
    ['method', 'route', 'status'],
  )
  registry.registerMetric(requests.metric)
  const duration = fastHistogram(
    'plant_store_http_request_duration_seconds',
    'Time from a request arriving to its answer being written, by route pattern',
    'route',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 6, 10],
  )
  registry.registerMetric(duration.metric)
  return (method, route, status, seconds) => {
    requests.inc(method, route, String(status))
    duration.observe(route, seconds)
  }
}

/** Creates by outcome, statements, and the database's unavailability and lost connections. */
function storeMetrics(
  registers: Registry[],
): Pick<
  Metrics,
  | 'createAnswered'
  | 'statementRan'
  | 'unavailable'
  | 'connectionClosed'
  | 'createsResent'
  | 'heldCreateEnded'
> {
  // The three reports of every statement (at low rates, of every create) keep plain numbers:
  // prom-client's own validate and hash their labels at each update (fast-metric.ts).
  const creates = fastCounter(
    'plant_store_creates_total',
    'POST /plants answers by outcome: created, retry (same id and contents), conflict (40009), invalid (40001-40005), unavailable (503)',
    ['outcome'],
  )
  for (const outcome of createOutcomes) creates.zero(outcome)
  const rows = fastPlainHistogram(
    'plant_store_create_batch_rows',
    'Rows per insert statement: concurrent creates share one statement and one commit',
    // Up to the most rows one statement takes.
    [1, 2, 5, 10, 20, 50, 100, 200, 500, limits.batch.maxBatch],
  )
  const statements = fastPlainHistogram(
    'plant_store_create_statement_duration_seconds',
    'Time of one batch of creates in the database (insert, and the look-up of ids that existed)',
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
  )
  for (const registry of registers)
    for (const { metric } of [creates, rows, statements]) registry.registerMetric(metric)
  const unavailable = new Counter({
    name: 'plant_store_database_unavailable_total',
    help: `Requests answered 503 because of the database: queue_full (too many creates waiting), deadline (no answer within ${limits.database.request / 1000} s), database (connection lost or refused, statement timeout)`,
    labelNames: ['reason'],
    registers,
  })
  for (const reason of unavailableReasons) unavailable.inc({ reason }, 0)
  const closed = new Counter({
    name: 'plant_store_database_connections_closed_total',
    help: `Database connections of the pool closed: lost (then reopened when needed), or idle for ${limits.database.idle / 1000} s; a rise under load means reconnects`,
    registers,
  })
  const resent = new Counter({
    name: 'plant_store_creates_resent_total',
    help: `Creates sent again because their statement failed for want of a database, by reason (refused, connection_lost, terminated, not_accepting: starting or stopping, read_only, …); each is held until it is stored or its ${limits.database.request / 1000}-s deadline passes`,
    labelNames: ['reason'],
    registers,
  })
  for (const reason of resendReasons) resent.inc({ reason }, 0)
  const held = new Histogram({
    name: 'plant_store_create_held_seconds',
    help: "Time from a create's first failed statement to its answer, by outcome: answered (by the database, after resends), unavailable (503 at its deadline) or fault (a 500: neither)",
    labelNames: ['outcome'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 4, 5, limits.database.request / 1000],
    registers,
  })
  for (const outcome of ['answered', 'unavailable', 'fault']) held.zero({ outcome })
  return {
    createAnswered: (outcome: CreateOutcomeLabel) => creates.inc(outcome),
    statementRan(batchRows: number, seconds: number) {
      rows.observe(batchRows)
      statements.observe(seconds)
    },
    unavailable: (reason: UnavailableReason) => unavailable.inc({ reason }),
    connectionClosed: () => closed.inc(),
    createsResent: (reason, creates) => resent.inc({ reason }, creates),
    heldCreateEnded: (outcome, seconds) => held.observe({ outcome }, seconds),
  }
}

/**
 * The service's metrics code on a registry of its own that nothing reads or exposes: what the
 * warm-up reports (warm-up.ts) is counted there and thrown away with it, so that the code every
 * request runs through is compiled before the first request, and the service's own metrics
 * count none of the warm-up. No process metrics: nothing of it outlives the warm-up.
 */
export function warmUpMetrics(): Metrics {
  const registry = new Registry()
  return Object.freeze({
    requestAnswered: httpMetrics(registry),
    ...storeMetrics([registry]),
    watch: nothing,
    handler: undefined,
  })
}

/** Gauges read at scrape time from the queue and the token cache, once they are watched. */
function stateGauges(registers: Registry[], sources: () => MetricSources | undefined): void {
  new Gauge({
    name: 'plant_store_database_disk_full',
    help: "1 while the database's disk is full: from the first create refused for want of disk space until one is stored again (/readyz says 503 meanwhile); else 0",
    registers,
    // With WORKERS, 1 when any worker found it full.
    aggregator: 'max',
    collect() {
      this.set(sources()?.diskFull() === true ? 1 : 0)
    },
  })
  new Counter({
    name: 'plant_store_log_lines_dropped_total',
    help: 'Log lines that could not be written to standard output (its disk full, its reader gone) and were dropped; the service goes on',
    registers,
    collect() {
      this.reset()
      this.inc(droppedLogLines())
    },
  })
  new Counter({
    name: 'plant_store_spans_exported_total',
    help: 'Spans handed to the OTLP collector in exports that succeeded (0 while OTEL_EXPORTER_OTLP_ENDPOINT is unset)',
    registers,
    collect() {
      this.reset()
      this.inc(spanCounts.exported)
    },
  })
  new Counter({
    name: 'plant_store_spans_dropped_total',
    help: 'Spans dropped, by reason: queue_full (OTEL_BSP_MAX_QUEUE_SIZE spans were waiting to be sent), export_failed (the collector did not take them in time); requests never wait for the collector',
    labelNames: ['reason'],
    registers,
    collect() {
      this.reset()
      this.inc({ reason: 'queue_full' }, spanCounts.queueFull)
      this.inc({ reason: 'export_failed' }, spanCounts.exportFailed)
    },
  })
  new Gauge({
    name: 'plant_store_create_queue_waiting',
    help: `Creates waiting for a statement (at most ${formatted(limits.batch.maxQueued)}; beyond, creates are refused 503)`,
    registers,
    collect() {
      this.set(sources()?.queue().queued ?? 0)
    },
  })
  new Gauge({
    name: 'plant_store_create_statements_in_flight',
    help: `Insert statements running in the database (at most ${limits.batch.maxInFlight}; on an instance on a Citus worker, at most ${limits.batch.maxInFlightPerWorker} per worker)`,
    registers,
    collect() {
      this.set(sources()?.queue().inFlight ?? 0)
    },
  })
  new Gauge({
    name: 'plant_store_token_cache_tokens',
    help: 'Valid (not revoked) API tokens in this instance’s cache',
    registers,
    // With WORKERS, each worker holds the same tokens.
    aggregator: 'max',
    collect() {
      this.set(sources()?.tokens().valid ?? 0)
    },
  })
  new Gauge({
    name: 'plant_store_token_expiry_timestamp_seconds',
    help: `When each token that works and expires does so (Unix time; the current token of each name). Alert on (plant_store_token_expiry_timestamp_seconds - time()) < ${limits.tokens.warnBefore / 86_400_000} * 86400`,
    labelNames: ['token'],
    registers,
    // With WORKERS, each worker holds the same tokens.
    aggregator: 'max',
    collect() {
      this.reset()
      for (const [token, at] of sources()?.tokens().expiries ?? []) this.set({ token }, at / 1000)
    },
  })
  new Gauge({
    name: 'plant_store_token_cache_age_seconds',
    help: `Seconds since the token cache last reloaded successfully (reloads on every change, and every ${limits.tokens.reloadEvery / 1000} s)`,
    registers,
    // With WORKERS, the stalest worker's.
    aggregator: 'max',
    collect() {
      const loadedAt = sources()?.tokens().loadedAt
      this.set(loadedAt === undefined ? Number.NaN : (Date.now() - loadedAt) / 1000)
    },
  })
}

/**
 * Creates the metrics of one service instance in a registry of its own, with Node's default
 * process metrics. Counters are created with every label value at zero, so that `rate()` and
 * alerts see a series before its first event.
 */
export function createMetrics({ clusterWorker = false } = {}): Metrics {
  const registry = serviceRegistry(clusterWorker)
  const registers = [registry]
  const requestAnswered = httpMetrics(registry)
  const store = storeMetrics(registers)
  let sources: MetricSources | undefined
  stateGauges(registers, () => sources)
  return Object.freeze({
    requestAnswered,
    ...store,
    watch(given: MetricSources) {
      sources = given
    },
    handler: shared(async () => ({
      kind: 'content' as const,
      type: registry.contentType,
      body: Buffer.from(clusterWorker ? await metricsOfAllWorkers() : await registry.metrics()),
      cacheControl: 'no-store',
    })),
  })
}
