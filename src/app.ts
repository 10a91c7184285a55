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
import { buildOpenApiDocument } from './openapi.ts'
import { createPlantHandler } from './plants/create-plant.ts'
import type { PlantStore } from './plants/repository.ts'

/** What the HTTP application is built from. */
export type AppDeps = {
  readonly sql: Sql
  readonly store: PlantStore
  readonly tokens: TokenCache
  readonly log: Log
}

/** The one place where the HTTP server is assembled: the route table and its handlers. */
export function createApp({ sql, store, tokens, log }: AppDeps): Server {
  const openapi = buildOpenApiDocument()
  const route = createRouter([
    {
      method: 'POST',
      path: '/plants',
      handler: createPlantHandler({ tokens, store, databaseDeadlineMs: databaseLimits.request }),
    },
    { method: 'GET', path: '/healthz', handler: healthz },
    { method: 'GET', path: '/readyz', handler: createReadyz(sql, 2_000) },
    { method: 'GET', path: '/openapi.json', handler: () => reply(openapi) },
    ...createDocsRoutes(),
  ])
  return createHttpServer({ route, log })
}
