import { Agent, request } from 'node:http'
import { type AppSettings, createApp } from './app.ts'
import type { TokenCache, TokenEntry } from './auth/token-cache.ts'
import { generateToken } from './auth/tokens.ts'
import { listen } from './http/lifecycle.ts'
import { limits } from './limits.ts'
import { createLog, describeError, type Log, type LogLevel } from './log.ts'
import { type Metrics, warmUpMetrics } from './metrics/metrics.ts'
import { createdOutcome, echoBatch, type NewRow } from './plants/batch-sql.ts'
import { createBatcher } from './plants/batcher.ts'
import type { PlantStore } from './plants/store.ts'

// A fresh process runs its first creates several times slower than later ones: V8 has compiled
// nothing of their path yet, and its heap is still small. A new instance in a rolling deploy
// meets its share of the traffic in exactly that state. So before the instance listens, creates
// are run through a private copy of the HTTP application, whose store sends each batch through
// the service's own connections as a statement that stores nothing.

// The creates are shaped as clients' are, so that the code V8 compiles for them is the code that
// serves the first clients, not code it throws away at their first request (BENCHMARKS.md, "The
// warm-up's creates shaped as clients' are"): a token of the real shape, checksum and all, known
// only to this process; the token's name made at run time, as a name read from the database is;
// each create's name a string of its own, and a third of them without a tag.
const warmToken = generateToken()
const entry: TokenEntry = {
  id: '0',
  name: Buffer.from('warm-up').toString(),
  expiresAt: null,
  endsAt: null,
  lastUsedAt: 0,
}

/** A token cache that knows the warm-up token alone. */
const warmTokens: TokenCache = {
  verify: (token) => (token === warmToken ? entry : undefined),
  start: async () => {},
  reload: async () => {},
  state: () => ({ valid: 1, loadedAt: Date.now(), expiries: new Map() }),
  close: async () => {},
}

const authorization = `Bearer ${warmToken}`
const json = 'application/json'
/**
 * The headers of the warm-up's requests, in turn: five layouts (which headers, in which order),
 * as a service's many clients send, with a request id and a trace context among them. Node
 * builds each request's header object in the order its headers arrive, and code that met one
 * layout alone was compiled again at the first client that sent another; after five it is
 * compiled for any.
 */
const layouts: ((host: string, length: number, id: number) => Record<string, string | number>)[] = [
  (host, length) => ({ host, authorization, 'content-type': json, 'content-length': length }),
  (host, length) => ({
    host,
    'user-agent': 'warm-up/1',
    accept: json,
    authorization,
    'content-type': json,
    'content-length': length,
  }),
  (host, length, id) => ({
    host,
    'content-type': json,
    'content-length': length,
    authorization,
    'x-request-id': `warm-up-${id}`,
  }),
  (host, length, id) => ({
    host,
    authorization,
    'content-type': json,
    'content-length': length,
    traceparent: `00-${id.toString(16).padStart(32, '0')}-${id.toString(16).padStart(16, '0')}-01`,
  }),
  (host, length) => ({
    host,
    'accept-encoding': 'gzip',
    'content-type': json,
    authorization,
    'content-length': length,
    'user-agent': 'warm-up/2',
  }),
]

/**
 * A store that stores nothing: each batch, through the service's own batcher, is sent through
 * `store`'s statement slots (its probe) as a statement that reads its rows back
 * (`echoBatch`, the insert's arrays), and each create is answered as created, in the outcome a
 * stored create has (`createdOutcome`); its probe is `store`'s own. (Inserting the batches in
 * transactions rolled back at once, the insert's own code, made a new instance's first second
 * slower, not faster: BENCHMARKS.md, same section.)
 */
function echoStore(store: PlantStore, statementRan: Metrics['statementRan']): PlantStore {
  const batcher = createBatcher(
    async (rows: readonly NewRow[]) => {
      const echoed = await store.probe(
        (sql) => echoBatch(sql, rows),
        performance.now() + limits.database.connect,
      )
      return echoed.map(createdOutcome)
    },
    limits.batch,
    { statementRan },
  )
  return {
    create: (plant, createdBy, expiresAt, trace) =>
      batcher.submit({ plant, createdBy, trace }, expiresAt),
    probe: store.probe,
    load: batcher.load,
    diskFull: () => undefined,
    checkDisk: async () => undefined,
  }
}

/**
 * Sends `creates` creates through a private copy of the service's HTTP application on a port of
 * its own on 127.0.0.1: first `atOnce` of them at once, each on a new connection (what a new
 * instance meets when a balancer's or a load's connections reach it: accepting them, each one's
 * parser and first request), then the rest `connections` at a time on kept-alive connections.
 * The same code as the service's (parser, token check, validation, batcher, the driver on
 * `store`'s connections, answers, the request log formatted at `level`, the metrics counted on
 * a registry of their own), with nothing stored, logged or counted.
 * Resolves with the time it took, the creates sent, the connections the copy accepted at once,
 * and the status of the first not answered 200, which ends it.
 */
async function warmUp(
  store: PlantStore,
  settings: AppSettings,
  level: LogLevel,
  creates: number,
  connections: number = limits.warmUp.connections,
): Promise<{ ms: number; sent: number; atOnce: number; failedStatus?: number | undefined }> {
  const started = performance.now()
  let failedStatus: number | undefined
  let sent = 0
  let accepted = 0
  if (creates <= 0) return { ms: 0, sent, atOnce: 0 }
  // Both ends of each connection are this process's: half of MAX_CONNECTIONS at most.
  const atOnce = Math.min(
    limits.warmUp.atOnce,
    creates,
    Math.floor((settings.maxConnections ?? Number.POSITIVE_INFINITY) / 2),
  )
  // The metrics' code is warmed too, on a registry of its own that nothing reads (BENCHMARKS.md,
  // "A fresh instance's metrics").
  const metrics = warmUpMetrics()
  const server = createApp({
    store: echoStore(store, metrics.statementRan),
    tokens: warmTokens,
    log: createLog(level, () => {}),
    metrics,
    settings: { ...settings, authFailureLimit: undefined, rateLimit: undefined },
    metricsRoute: false,
  })
  server.on('connection', () => {
    accepted++
  })
  const agent = new Agent({ keepAlive: true, maxSockets: connections })
  const burst = new Agent({ keepAlive: true, maxSockets: Math.max(1, atOnce) })
  try {
    // In a node:cluster worker, a port of its own: never one shared with the other workers.
    const { port } = await listen(server, 0, '127.0.0.1', { exclusive: true })
    const one = (id: number, through: Agent) =>
      new Promise<void>((resolve, reject) => {
        const body =
          id % 3 === 0
            ? `{"id":${id},"name":"warm-up plant ${id}"}`
            : `{"id":${id},"name":"warm-up plant ${id}","tag":"warm-up ${id % 100}"}`
        const req = request(
          {
            agent: through,
            host: '127.0.0.1',
            port,
            method: 'POST',
            path: '/plants',
            headers: layouts[id % layouts.length]?.(
              `127.0.0.1:${port}`,
              Buffer.byteLength(body),
              id,
            ),
          },
          (res) => {
            // One that fails (the database went away meanwhile) ends the warm-up.
            if (res.statusCode !== 200) failedStatus ??= res.statusCode
            res.resume()
            res.on('end', resolve)
            res.on('error', reject)
          },
        )
        req.on('error', reject)
        req.end(body)
      })
    // A connection that fails (out of file handles) only warms less: the rest go on.
    await Promise.allSettled(Array.from({ length: atOnce }, () => one(++sent, burst)))
    burst.destroy()
    const acceptedAtOnce = accepted
    await Promise.all(
      Array.from({ length: connections }, async () => {
        while (failedStatus === undefined && sent < creates) await one(++sent, agent)
      }),
    )
    return { ms: performance.now() - started, sent, atOnce: acceptedAtOnce, failedStatus }
  } finally {
    burst.destroy()
    agent.destroy()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

/**
 * Readies a new instance before it listens: each statement slot connected, with the batch
 * statements prepared and run on no rows `statements` times, then `creates` creates through a
 * private copy of the application (`warmUp`), and one page written and rolled back to see
 * whether the database's disk has room. A database that cannot take them now is for `/readyz`
 * to report: the start goes on, and says so.
 */
export async function warmBeforeServing(
  plants: { readonly store: PlantStore; readonly ready: (times: number) => Promise<void> },
  settings: AppSettings & { readonly logLevel: LogLevel },
  log: Log,
  { creates, statements }: { readonly creates: number; readonly statements: number },
): Promise<void> {
  await plants.ready(statements).catch((err: unknown) =>
    log.debug('could not ready the create connections before serving', {
      error: describeError(err),
    }),
  )
  // A start on a full disk: nothing here writes a page, so one is written (and rolled back) to
  // see; when there is no room, the store's episode says so in the log and /readyz says 503.
  await plants.store
    .checkDisk(performance.now() + limits.database.readiness)
    .catch((err: unknown) =>
      log.debug('could not see whether the database has room on its disk', {
        error: describeError(err),
      }),
    )
  const warm = await warmUp(plants.store, settings, settings.logLevel, creates)
  if (warm.failedStatus !== undefined)
    log.warn('warm-up ended early: a create through the private copy was not answered 200', {
      status: warm.failedStatus,
      sent: warm.sent,
    })
  else if (warm.sent > 0)
    log.info('warmed up through a private copy of the service', {
      creates: warm.sent,
      connectionsAtOnce: warm.atOnce,
      ms: Math.round(warm.ms),
    })
}
