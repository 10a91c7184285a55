import { createToken } from '../../src/auth/token-repository.ts'
import { parseConfig } from '../../src/config.ts'
import { createLog } from '../../src/log.ts'
import { isFailure } from '../../src/outcome.ts'
import type { BatchLimits } from '../../src/plants/store.ts'
import { type Service, startService } from '../../src/service.ts'
import { type Cleanup, createTestDatabase, type TestDatabase } from './database.ts'

/** The service as `npm start` runs it, on a free port of 127.0.0.1, with a database of its own. */
export type TestServer = Pick<Service, 'tokens' | 'store'> & {
  readonly base: string
  readonly db: TestDatabase
  /** Every log line the service wrote, parsed. */
  readonly logs: Record<string, unknown>[]
  /** A valid token (named `test-…`). */
  readonly token: string
  /** Creates a token and waits until this server accepts it. */
  readonly newToken: (name: string) => Promise<string>
  /** Stops it before the test's end (it is stopped then anyway). */
  readonly close: () => Promise<void>
  /** `POST /plants` with the test token and a JSON content type, unless overridden. */
  readonly post: (
    body: unknown,
    init?: { token?: string; headers?: Record<string, string> },
  ) => Promise<Response>
}

let counter = 0

/**
 * The warm-up of a service started in a test process: short, since the process has run the
 * same code already (test/warm-up.test.ts runs the service's own, `limits.warmUp`).
 */
export const testWarmUp = { creates: 20, statements: 2 }

/**
 * Starts the service (`startService`, the one `npm start` runs) with `LOG_LEVEL=debug` on port 0
 * of 127.0.0.1, stopped after `t`. `env` adds settings (`METRICS: 'off'`, …); `connectTo`,
 * `batchLimits`, `lastUseEveryMs` and `warmUp` are the service's own options.
 */
export async function startTestServer(
  t: Cleanup,
  {
    db,
    env = {},
    connectTo,
    batchLimits,
    lastUseEveryMs,
    warmUp = testWarmUp,
  }: {
    db?: TestDatabase
    env?: Record<string, string>
    connectTo?: (url: string) => string
    batchLimits?: BatchLimits
    lastUseEveryMs?: number
    /** `'setting'`: the service's own, from `WARM_UP_CREATES` in `env` or its default. */
    warmUp?: { creates: number; statements: number } | 'setting'
  } = {},
): Promise<TestServer> {
  const database = db ?? (await createTestDatabase(t))
  const logs: Record<string, unknown>[] = []
  const log = createLog('debug', (line) => logs.push(JSON.parse(line) as Record<string, unknown>))
  const config = parseConfig({
    DATABASE_URL: database.url,
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'debug',
    ...env,
  })
  const service = await startService(config, log, {
    ...(connectTo && { connectTo }),
    ...(batchLimits && { batchLimits }),
    ...(lastUseEveryMs !== undefined && { lastUseEveryMs }),
    ...(warmUp !== 'setting' && { warmUp }),
  })
  t.after(() => service.close(0))
  const base = service.url

  async function newToken(name: string): Promise<string> {
    const created = await createToken(database.sql, name)
    if (isFailure(created)) throw new Error(created.message)
    await service.tokens.reload()
    return created
  }
  const token = await newToken(`test-${process.pid}-${++counter}`)

  return {
    base,
    db: database,
    tokens: service.tokens,
    store: service.store,
    logs,
    token,
    newToken,
    close: () => service.close(0),
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
