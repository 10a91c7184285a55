import type { Server } from 'node:http'
import type { TokenCache, TokenEntry } from './auth/token-cache.ts'
import type { Config } from './config.ts'
import { createReadyz, healthz } from './health/health.ts'
import { drain, listen } from './http/lifecycle.ts'
import { createBuckets } from './http/rate-limit.ts'
import { createRouter, type Route } from './http/router.ts'
import { createHttpServer } from './http/server.ts'
import { reply } from './http/types.ts'
import { limits } from './limits.ts'
import type { Log } from './log.ts'
import type { Metrics } from './metrics/metrics.ts'
import { buildOpenApiDocument } from './openapi/document.ts'
import { createDocsRoutes } from './openapi/reference-page.ts'
import { createPlantHandler } from './plants/create-plant.ts'
import type { PlantStore } from './plants/store.ts'
import type { Spans } from './tracing/spans.ts'

/** The settings the HTTP application reads. */
export type AppSettings = Pick<
  Config,
  'traceContext' | 'maxConnections' | 'authFailureLimit' | 'rateLimit' | 'trustedProxies'
>

/** What the HTTP application is built from. */
export type AppDeps = {
  readonly store: PlantStore
  readonly tokens: TokenCache
  /** Hears each use of a valid token (its last use is recorded). */
  readonly tokenUsed?: (token: TokenEntry, now: number) => void
  readonly log: Log
  readonly metrics: Metrics
  readonly settings: AppSettings
  /** Serve `GET /metrics` here; false when it has a port of its own (METRICS_PORT). */
  readonly metricsRoute: boolean
  /** The database is a Citus worker: its migrations table is the coordinator's. */
  readonly citusWorker?: boolean
  /** Why the instance is leaving (SIGTERM), once it is: `/readyz` 503, `Connection: close`. */
  readonly leaving?: () => string | undefined
  /** A span per request and per statement (OTEL_EXPORTER_OTLP_ENDPOINT). */
  readonly spans?: Spans | undefined
}

/** `GET /metrics`, when metrics are on. */
function metricsRoutes(metrics: Metrics): Route[] {
  return metrics.handler ? [{ method: 'GET', path: '/metrics', handler: metrics.handler }] : []
}

/**
 * The server of `METRICS_PORT`: `GET /metrics` alone, with the same answers, limits and request
 * log as the service's own port.
 */
export function createMetricsServer(metrics: Metrics, log: Log, settings: AppSettings): Server {
  return createHttpServer({
    route: createRouter(metricsRoutes(metrics)),
    log,
    metrics,
    traceContext: false,
    maxConnections: settings.maxConnections,
    trustedProxies: settings.trustedProxies,
  })
}

/** The one place where the HTTP server is assembled: the route table and its handlers. */
export function createApp({
  store,
  tokens,
  tokenUsed,
  log,
  metrics,
  settings,
  metricsRoute,
  citusWorker = false,
  leaving = () => undefined,
  spans,
}: AppDeps): Server {
  const openapi = buildOpenApiDocument()
  metrics.watch({
    queue: store.load,
    tokens: tokens.state,
    diskFull: () => store.diskFull() !== undefined,
  })
  const route = createRouter([
    {
      method: 'POST',
      path: '/plants',
      handler: createPlantHandler({
        tokens,
        tokenUsed,
        store,
        databaseDeadlineMs: limits.database.request - limits.database.answerMargin,
        createAnswered: metrics.createAnswered,
        authFailures:
          settings.authFailureLimit === undefined
            ? undefined
            : createBuckets(settings.authFailureLimit, limits.authFailures.windowSeconds),
        tokenRate:
          settings.rateLimit === undefined ? undefined : createBuckets(settings.rateLimit, 1),
      }),
    },
    { method: 'GET', path: '/healthz', handler: healthz },
    {
      method: 'GET',
      path: '/readyz',
      handler: createReadyz(
        store,
        log,
        limits.database.readiness - limits.database.answerMargin,
        !citusWorker,
        leaving,
      ),
    },
    { method: 'GET', path: '/openapi.json', handler: () => reply(openapi) },
    ...createDocsRoutes(),
    ...(metricsRoute ? metricsRoutes(metrics) : []),
  ])
  return createHttpServer({
    route,
    log,
    metrics,
    traceContext: settings.traceContext,
    spans,
    maxConnections: settings.maxConnections,
    trustedProxies: settings.trustedProxies,
    leaving: () => leaving() !== undefined,
  })
}

/** The HTTP side of a running service. */
export type ServingHttp = {
  readonly url: string
  /**
   * Says the instance is leaving (`reason`): `/readyz` answers 503 with it and every answer
   * closes its connection, while the port goes on serving and no idle connection is closed.
   */
  readonly leave: (reason: string) => void
  /** Drains the service's port (at most `graceMs`), then the metrics port. */
  readonly close: (graceMs: number) => Promise<void>
}

/**
 * Listens on the service's port (and on `METRICS_PORT` when set), and says where: a worker says
 * it is ready; with WORKERS the primary says where the service listens once every worker does.
 */
export async function serveHttp(
  deps: Omit<AppDeps, 'metricsRoute' | 'settings'>,
  config: Config,
  role: 'single' | 'worker',
): Promise<ServingHttp> {
  const { log, metrics } = deps
  const ownMetricsPort = config.metrics && config.metricsPort !== undefined
  let leaving: string | undefined
  const server = createApp({
    ...deps,
    settings: config,
    metricsRoute: !ownMetricsPort,
    leaving: () => leaving,
  })
  const { url, port } = await listen(server, config.port, config.host)
  const metricsServer = ownMetricsPort ? createMetricsServer(metrics, log, config) : undefined
  if (metricsServer) {
    const { url: at } = await listen(
      metricsServer,
      config.metricsPort ?? 0,
      config.metricsHost,
    ).catch((err: unknown) => {
      server.close()
      throw err
    })
    if (role !== 'worker')
      log.info('metrics served', { url: `${at}/metrics`, host: config.metricsHost })
  }
  if (role === 'worker') log.info('worker ready', { url, pid: process.pid })
  else log.info('listening', { url, host: config.host, port })
  return {
    url,
    leave(reason) {
      leaving ??= reason
    },
    async close(graceMs) {
      await drain(server, graceMs, log)
      if (metricsServer) await drain(metricsServer, 0, log)
    },
  }
}
