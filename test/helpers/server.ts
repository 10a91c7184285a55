import type { AddressInfo } from 'node:net'
import { createApp } from '../../src/app.ts'
import { createTokenCache, type TokenCache } from '../../src/auth/token-cache.ts'
import { createToken } from '../../src/auth/token-repository.ts'
import { createSql, leaveReadOnlyServer } from '../../src/db/sql.ts'
import { createLog } from '../../src/log.ts'
import { createMetrics, type Metrics, noMetrics } from '../../src/metrics.ts'
import {
  type BatchLimits,
  createPlantRepository,
  type PlantStore,
} from '../../src/plants/repository.ts'
import { type Cleanup, createTestDatabase, type TestDatabase } from './database.ts'

/** A service started inside the test process on a free port, with its own database. */
export type TestServer = {
  readonly base: string
  readonly db: TestDatabase
  readonly tokens: TokenCache
  readonly store: PlantStore
  /** The service's metrics, as `GET /metrics` shows them. */
  readonly metrics: Metrics
  /** Every log line the service wrote, parsed. */
  readonly logs: Record<string, unknown>[]
  /** A valid token (named `test`). */
  readonly token: string
  /** Creates a token and waits until this server accepts it. */
  readonly newToken: (name: string) => Promise<string>
  /** `POST /plants` with the test token and a JSON content type, unless overridden. */
  readonly post: (
    body: unknown,
    init?: { token?: string; headers?: Record<string, string> },
  ) => Promise<Response>
}

let counter = 0

/**
 * Starts the service assembled as `src/service.ts` does, on port 0, stopped after `t`.
 * `connectTo` lets the service reach its database another way (through a proxy).
 */
export async function startTestServer(
  t: Cleanup,
  {
    db,
    connectTo,
    batchLimits,
    metrics: withMetrics = true,
    traceContext = true,
  }: {
    db?: TestDatabase
    connectTo?: (url: string) => string
    batchLimits?: BatchLimits
    /** As METRICS=on (the default) or off. */
    metrics?: boolean
    /** As TRACE_CONTEXT=on (the default) or off. */
    traceContext?: boolean
  } = {},
): Promise<TestServer> {
  const database = db ?? (await createTestDatabase(t))
  const logs: Record<string, unknown>[] = []
  const log = createLog('debug', (line) => logs.push(JSON.parse(line) as Record<string, unknown>))
  const metrics = withMetrics ? createMetrics() : noMetrics
  const sql = createSql(connectTo ? connectTo(database.url) : database.url, log, {
    connectionClosed: metrics.connectionClosed,
  })
  const tokens = createTokenCache(sql, log)
  await tokens.start()
  const store = createPlantRepository(sql, batchLimits, {
    statementRan: metrics.statementRan,
    readOnly: leaveReadOnlyServer(sql, log),
  })
  const server = createApp({ sql, store, tokens, log, metrics, traceContext })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
    await tokens.close()
    await sql.end({ timeout: 5 })
  })
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

  async function newToken(name: string): Promise<string> {
    const created = await createToken(database.sql, name)
    if (!('token' in created)) throw new Error(created.problem)
    await tokens.reload()
    return created.token
  }
  const token = await newToken(`test-${process.pid}-${++counter}`)

  return {
    base,
    db: database,
    tokens,
    store,
    metrics,
    logs,
    token,
    newToken,
    post(body, init = {}) {
      return fetch(`${base}/plants`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${init.token ?? token}`,
          'content-type': 'application/json',
          ...init.headers,
        },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      })
    },
  }
}

const idBase = Date.now() * 1000

/** A fresh id, unique within this test process (each test file has a database of its own). */
export function uniqueId(): number {
  return idBase + ++counter
}
