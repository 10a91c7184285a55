import type { Server } from 'node:http'
import type { Sql } from 'postgres'
import type { TokenCache } from './auth/token-cache.ts'
import { databaseLimits } from './db/sql.ts'
import { createDocsRoutes } from './docs/reference-page.ts'
import { createReadyz, healthz } from './health.ts'
import { createRouter } from './http/router.ts'
import { createHttpServer } from './http/server.ts'
import { reply } from './http/types.ts'
import type { Log } from './log.ts'
import { type Metrics, noMetrics } from './metrics.ts'
import { buildOpenApiDocument } from './openapi.ts'
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
}

/** The one place where the HTTP server is assembled: the route table and its handlers. */
export function createApp({
  sql,
  store,
  tokens,
  log,
  metrics = noMetrics,
  traceContext = true,
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
        databaseDeadlineMs: databaseLimits.request,
        createAnswered: metrics.createAnswered,
      }),
    },
    { method: 'GET', path: '/healthz', handler: healthz },
    { method: 'GET', path: '/readyz', handler: createReadyz(sql, 2_000) },
    { method: 'GET', path: '/openapi.json', handler: () => reply(openapi) },
    ...createDocsRoutes(),
    ...(metrics.handler ? [{ method: 'GET', path: '/metrics', handler: metrics.handler }] : []),
  ])
  return createHttpServer({ route, log, metrics, traceContext })
}
