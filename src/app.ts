import type { Server } from 'node:http'
import type { Sql } from 'postgres'
import type { TokenCache } from './auth/token-cache.ts'
import { createReadyz, healthz } from './http/health.ts'
import { createBuckets } from './http/rate-limit.ts'
import { createRouter } from './http/router.ts'
import { createHttpServer } from './http/server.ts'
import { reply } from './http/types.ts'
import { limits } from './limits.ts'
import type { Log } from './log.ts'
import { type Metrics, noMetrics } from './metrics/metrics.ts'
import { buildOpenApiDocument } from './openapi/document.ts'
import { createDocsRoutes } from './openapi/reference-page.ts'
import { createPlantHandler } from './plants/create-plant.ts'
import type { PlantStore } from './plants/repository.ts'

/** What the HTTP application is built from. */
export type AppDeps = {
  readonly sql: Sql
  readonly store: PlantStore
  readonly tokens: TokenCache
  readonly log: Log
  /** The metrics (`GET /metrics` when on); none by default. */
  readonly metrics?: Metrics
  /** Keep or start a W3C trace context per request (default true). */
  readonly traceContext?: boolean
  /** Serve `GET /metrics` here (default true); false when it has a port of its own. */
  readonly metricsRoute?: boolean
  /** Open client connections at most; `undefined`: no cap. */
  readonly maxConnections?: number | undefined
  /** Failed authentications per client address per 10 s (AUTH_FAILURE_LIMIT); none if undefined. */
  readonly authFailureLimit?: number | undefined
  /** Requests per token per second (RATE_LIMIT); none if undefined. */
  readonly rateLimit?: number | undefined
  /** Proxies whose X-Forwarded-For names the client (TRUSTED_PROXIES). */
  readonly trustedProxies?: ReadonlySet<string>
}

/**
 * The server of `METRICS_PORT`: `GET /metrics` alone, with the same answers, limits and request
 * log as the service's own port.
 */
export function createMetricsServer(metrics: Metrics, log: Log, maxConnections?: number): Server {
  const route = createRouter(
    metrics.handler ? [{ method: 'GET', path: '/metrics', handler: metrics.handler }] : [],
  )
  return createHttpServer({
    route,
    log,
    metrics,
    traceContext: false,
    ...(maxConnections === undefined ? {} : { maxConnections }),
  })
}

/** The one place where the HTTP server is assembled: the route table and its handlers. */
export function createApp({
  sql,
  store,
  tokens,
  log,
  metrics = noMetrics,
  traceContext = true,
  metricsRoute = true,
  maxConnections,
  authFailureLimit,
  rateLimit,
  trustedProxies,
}: AppDeps): Server {
  const openapi = buildOpenApiDocument()
  metrics.watch({ queue: store.load, tokens: tokens.state })
  const route = createRouter([
    {
      method: 'POST',
      path: '/plants',
      handler: createPlantHandler({
        tokens,
        store,
        databaseDeadlineMs: limits.database.request,
        createAnswered: metrics.createAnswered,
        authFailures:
          authFailureLimit === undefined
            ? undefined
            : createBuckets(authFailureLimit, limits.authFailures.windowSeconds),
        tokenRate: rateLimit === undefined ? undefined : createBuckets(rateLimit, 1),
      }),
    },
    { method: 'GET', path: '/healthz', handler: healthz },
    { method: 'GET', path: '/readyz', handler: createReadyz(sql, limits.database.readiness) },
    { method: 'GET', path: '/openapi.json', handler: () => reply(openapi) },
    ...createDocsRoutes(),
    ...(metrics.handler && metricsRoute
      ? [{ method: 'GET', path: '/metrics', handler: metrics.handler }]
      : []),
  ])
  return createHttpServer({
    route,
    log,
    metrics,
    traceContext,
    ...(maxConnections === undefined ? {} : { maxConnections }),
    ...(trustedProxies === undefined ? {} : { trustedProxies }),
  })
}
