import { serveHttp } from './app.ts'
import { startTokens } from './auth/start-tokens.ts'
import type { TokenCache } from './auth/token-cache.ts'
import type { Config } from './config.ts'
import { openServicePools } from './db/reach/sql.ts'
import { defaultDataDir, openDatabase, prepareDatabase, sessionsOf } from './db/start/open.ts'
import { warnAboutDatabase } from './db/start/server-settings.ts'
import { openTopology } from './db/topology.ts'
import { limits } from './limits.ts'
import { describeError, type Log } from './log.ts'
import { createMetrics, noMetrics } from './metrics/metrics.ts'
import { followWritePath } from './plants/citus.ts'
import { type BatchLimits, openPlantStore, type PlantStore } from './plants/store.ts'
import { startSpans } from './tracing/spans.ts'
import { warmBeforeServing } from './warm-up.ts'

/** A running service. */
export type Service = {
  /** Base URL the service listens on. */
  readonly url: string
  /**
   * Says the instance is leaving (`reason`): `/readyz` 503 with it, every answer `Connection:
   * close`, and nothing else changes until `close`.
   */
  readonly leave: (reason: string) => void
  /** Stops accepting, finishes requests in flight (at most `graceMs`), releases everything. */
  readonly close: (graceMs?: number) => Promise<void>
  /** The token cache, which tests may reload instead of waiting for its notification. */
  readonly tokens: TokenCache
  /** The plant store, whose queue tests may watch. */
  readonly store: PlantStore
}

/**
 * What a caller may choose beyond the configuration; `cli/serve.ts` passes `role`, `dataDir` and
 * `stopRequested`, the tests the rest.
 */
export type ServiceOptions = {
  /**
   * `single` (the default): this process prepares the database (embedded start, migrations, dev
   * token) and serves. `worker`: a node:cluster worker, whose primary has prepared it.
   */
  readonly role?: 'single' | 'worker'
  /** Home of the embedded database and the dev token. */
  readonly dataDir?: string
  /** How the pool reaches the database URL (tests: through a proxy); the URL itself otherwise. */
  readonly connectTo?: (url: string) => string
  /** How creates are grouped into statements (tests make them small). */
  readonly batchLimits?: BatchLimits
  /** How often a token's last use is written at most (tests make it short). */
  readonly lastUseEveryMs?: number
  /** Set once a signal asks the process to stop: the start goes no further than its step. */
  readonly stopRequested?: () => string | undefined
  /**
   * What is run before listening, instead of `WARM_UP_CREATES`'s (`warmUpOf`): creates through a
   * private copy of the application (`warm-up.ts`), and the batch statements on no rows on each
   * statement slot.
   */
  readonly warmUp?: { readonly creates: number; readonly statements: number }
}

/**
 * The warm-up of `creates` creates: each statement slot runs the batch statements a tenth as
 * many times (at most `limits.warmUp.statements`, at least once, which connects it).
 */
export function warmUpOf(creates: number): { creates: number; statements: number } {
  return {
    creates,
    statements: Math.max(1, Math.min(limits.warmUp.statements, Math.ceil(creates / 10))),
  }
}

/**
 * Starts the whole service: database (embedded when `DATABASE_URL` is unset), migrations, token
 * cache, HTTP server. The one assembly: `npm start` (cli/serve.ts), each worker and the tests all
 * start this.
 * Whatever was started is released again if a later step fails.
 */
export async function startService(
  config: Config,
  log: Log,
  options: ServiceOptions = {},
): Promise<Service> {
  const { role = 'single', batchLimits = limits.batch } = options
  const warmUp = options.warmUp ?? warmUpOf(config.warmUpCreates)
  const held = holding(log)
  const goOn = () => {
    const signal = options.stopRequested?.()
    if (signal !== undefined) throw new Error(`${signal} received during start-up`)
  }
  try {
    // 1-3. The database, where each part connects, the pools for tokens and start-up.
    const { db, url, metrics, spans, topology, pools, writePath } = await connect(
      config,
      log,
      options,
      held,
      goOn,
    )

    // 4. The tokens: the dev token and the warnings about lifetimes, the cache, last uses.
    const tokens = await startTokens(pools.sql, pools.listen, log, {
      prepare:
        role === 'single'
          ? { embedded: db.owned, dataDir: options.dataDir ?? defaultDataDir }
          : undefined,
      lastUseEveryMs: options.lastUseEveryMs,
    })
    held.add(tokens.close)
    goOn()

    // 5. The plant store, on statement slots of its own.
    const plants = openPlantStore(url, log, {
      batchLimits,
      transactionPooler: config.poolMode === 'transaction',
      connectionClosed: metrics.connectionClosed,
      statementRan: metrics.statementRan,
      gapMetrics: metrics,
      writePath: writePath.current,
      spans,
      citus: topology.citus,
    })
    held.add(plants.close)
    // What the first creates would otherwise pay is paid before the instance listens.
    await warmBeforeServing(plants, config, log, warmUp)
    goOn()

    // 6. The HTTP ports.
    const { cache, used } = tokens
    const deps = { store: plants.store, tokens: cache, tokenUsed: used, log, metrics, spans }
    const http = await serveHttp({ ...deps, citusWorker: topology.citusWorker }, config, role)
    let closing: Promise<void> | undefined
    return {
      url: http.url,
      tokens: cache,
      store: plants.store,
      leave: http.leave,
      close(graceMs = limits.drain) {
        closing ??= http.close(graceMs).then(held.release)
        return closing
      },
    }
  } catch (err) {
    await held.release()
    throw err
  }
}

/**
 * The first steps of a start: the database (prepared here, with the embedded start and the
 * migrations, or by a worker's primary), metrics and spans, where each part connects (on a
 * Citus worker: the coordinator for tokens and sessions, each group's primary for its creates),
 * the pools for tokens and start-up, the warnings the database's settings call for, and how
 * plants are written. Each thing opened is `held`.
 */
async function connect(
  config: Config,
  log: Log,
  { role = 'single', dataDir = defaultDataDir, connectTo }: ServiceOptions,
  held: ReturnType<typeof holding>,
  goOn: () => void,
) {
  const single = role === 'single'
  const transactionPooler = config.poolMode === 'transaction'
  const prepared = single ? await prepareDatabase(config, log, dataDir) : undefined
  const db = prepared ?? (await openDatabase(config, log, { dataDir }))
  held.add(db.stop)
  goOn()
  const metrics = config.metrics ? createMetrics({ clusterWorker: !single }) : noMetrics
  const spans = await startSpans(config.spans, log)
  if (spans) held.add(() => spans.shutdown(limits.spansAtStop))
  const url = connectTo ? connectTo(db.url) : db.url

  const session = prepared?.sessions ?? (await sessionsOf(config, db, log))
  const topology = await openTopology(url, session, log)
  held.add(topology.stop)
  const pools = openServicePools(topology.tokensUrl, topology.sessionUrl, log, {
    transactionPooler,
    connectionClosed: metrics.connectionClosed,
    ...(topology.followTokens && { current: topology.followTokens }),
  })
  held.add(pools.end)

  await warnAboutDatabase(pools.sql, log, {
    transactionPooler,
    serverSettings: single && !db.owned,
    writesUrl: topology.writesUrl,
  })
  const writePath = await followWritePath(pools.sql, log, single)
  held.add(async () => writePath.stop())
  return { db, url, metrics, spans, topology, pools, writePath }
}

/** What a start has opened, released last first: at shutdown, or when a later step fails. */
function holding(log: Log) {
  const releases: (() => Promise<void>)[] = []
  return {
    add: (release: () => Promise<void>) => releases.push(release),
    async release() {
      for (const release of releases.splice(0).reverse())
        await release().catch((err: unknown) =>
          log.error('shutdown step failed', { error: describeError(err) }),
        )
    },
  }
}
