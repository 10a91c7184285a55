import { createApp, createMetricsServer } from './app.ts'
import { ensureDevToken } from './auth/dev-token.ts'
import { createLastUse } from './auth/last-use.ts'
import { createTokenCache, type TokenCache } from './auth/token-cache.ts'
import { watchTokenLifetimes } from './auth/token-warnings.ts'
import type { Config } from './config.ts'
import { plantsWritePath, watchWritePath } from './db/citus.ts'
import { defaultDataDir, openDatabase, prepareDatabase } from './db/open.ts'
import { warnAboutServerSettings, warnWithoutStatementTimeout } from './db/server-settings.ts'
import { openStatementSlots } from './db/slots.ts'
import { createSql, leaveReadOnlyServer } from './db/sql.ts'
import { drain, listen } from './http/lifecycle.ts'
import { limits } from './limits.ts'
import type { Log } from './log.ts'
import { createMetrics, noMetrics } from './metrics/metrics.ts'
import { type BatchLimits, createPlantRepository, type PlantStore } from './plants/repository.ts'

/** A running service. */
export type Service = {
  /** Base URL the service listens on. */
  readonly url: string
  /** Stops accepting, finishes requests in flight (at most `graceMs`), releases everything. */
  readonly close: (graceMs?: number) => Promise<void>
  /** The token cache, which tests may reload instead of waiting for its notification. */
  readonly tokens: TokenCache
  /** The plant store, whose queue tests may watch. */
  readonly store: PlantStore
}

/** What a caller may choose beyond the configuration; `main.ts` passes only `role`. */
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
}

/**
 * Starts the whole service: database (embedded when `DATABASE_URL` is unset), migrations, token
 * cache, HTTP server. The one assembly: `main.ts`, each worker and the tests all start this.
 * Whatever was started is released again if a later step fails.
 */
export async function startService(
  config: Config,
  log: Log,
  {
    role = 'single',
    dataDir = defaultDataDir,
    connectTo,
    batchLimits,
    lastUseEveryMs,
    stopRequested = () => undefined,
  }: ServiceOptions = {},
): Promise<Service> {
  const cleanups: (() => Promise<void>)[] = []
  const release = async () => {
    for (const cleanup of cleanups.reverse())
      await cleanup().catch((err: unknown) =>
        log.error('shutdown step failed', { error: String(err) }),
      )
  }
  const goOn = () => {
    const signal = stopRequested()
    if (signal !== undefined) throw new Error(`${signal} received during start-up`)
  }
  try {
    // A worker's primary has prepared the database before it started the worker.
    const db =
      role === 'worker'
        ? await openDatabase(config, log, { dataDir })
        : await prepareDatabase(config, log, dataDir)
    cleanups.push(db.stop)
    goOn()
    const sessionUrl = config.databaseDirectUrl ?? db.url
    const metrics = config.metrics ? createMetrics({ clusterWorker: role === 'worker' }) : noMetrics
    const transactionPooler = config.poolMode === 'transaction'
    const poolUrl = connectTo ? connectTo(db.url) : db.url
    // The creates have slots of their own (below); this pool serves token loads and start-up.
    const sql = createSql(poolUrl, log, {
      max: 2,
      connectionClosed: metrics.connectionClosed,
      transactionPooler,
    })
    cleanups.push(() => sql.end({ timeout: 5 }))
    // LISTEN needs a session: through a transaction pooler it goes to the direct URL instead.
    const listenSql = transactionPooler
      ? createSql(sessionUrl, log, { max: 1, applicationName: 'plant-store listen' })
      : sql
    if (listenSql !== sql) cleanups.push(() => listenSql.end({ timeout: 5 }))
    if (transactionPooler) await warnWithoutStatementTimeout(sql, log)
    // The embedded database gets these settings itself; a DBA's is only told.
    if (!db.owned && role === 'single') await warnAboutServerSettings(sql, log)
    if (db.owned && role === 'single') await ensureDevToken(sql, dataDir, log)
    // Once per start and then daily (with WORKERS the primary says it, primary.ts), before the
    // token cache starts: its first reload would otherwise run beside it on a second connection.
    if (role === 'single') {
      const stopWatching = await watchTokenLifetimes(sql, log)
      cleanups.push(async () => stopWatching())
    }
    // Citus routes a multi-row VALUES per shard, and pulls an unnest batch to the coordinator.
    // Read before the token cache starts, so that start-up queries share one connection.
    const citus = await plantsWritePath(sql, log, role === 'single')
    let writePath = citus.path
    // On Citus the path is read again every 10 s: distributing plants or moving its shards
    // needs no restart.
    if (citus.citus) {
      const stopWatching = watchWritePath(sql, log, writePath, (p) => {
        writePath = p
      })
      cleanups.push(async () => stopWatching())
    }
    const tokens = createTokenCache(sql, log, undefined, listenSql)
    await tokens.start()
    cleanups.push(tokens.close)
    // Last uses are written on the token pool, never on the creates' statement slots.
    const lastUse = createLastUse(sql, log, lastUseEveryMs)
    cleanups.push(lastUse.settled)

    goOn()
    // The creates' statements each have a connection of their own, which can be cut loose.
    const storeLimits = batchLimits ?? limits.batch
    const slots = openStatementSlots(poolUrl, log, storeLimits.maxInFlight, {
      connectionClosed: metrics.connectionClosed,
      transactionPooler,
    })
    cleanups.push(async () => {
      await Promise.all(slots.map((slot) => slot.end()))
    })
    const store = createPlantRepository(slots, storeLimits, {
      writePath: () => writePath,
      statementRan: metrics.statementRan,
      readOnly: leaveReadOnlyServer(log),
      cutLoose: (slot, ms, sockets) =>
        log.warn(
          `no answer from the database for ${ms} ms; closed the connection of statement slot ${slot} and opening a new one`,
          { sockets },
        ),
    })
    const ownMetricsPort = config.metrics && config.metricsPort !== undefined
    const server = createApp({
      store,
      tokens,
      tokenUsed: lastUse.note,
      log,
      metrics,
      settings: config,
      metricsRoute: !ownMetricsPort,
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
      cleanups.push(() => drain(metricsServer, 0, log))
      if (role !== 'worker') log.info(`metrics on ${at}/metrics`, { host: config.metricsHost })
    }
    // With WORKERS, the primary says where the service listens once every worker does.
    if (role === 'worker') log.info(`worker ready on ${url}`, { pid: process.pid })
    else log.info(`listening on ${url}`, { host: config.host, port })
    let closing: Promise<void> | undefined
    return {
      url,
      tokens,
      store,
      close(graceMs = limits.drain) {
        closing ??= (async () => {
          await drain(server, graceMs, log)
          await release()
        })()
        return closing
      },
    }
  } catch (err) {
    await release()
    throw err
  }
}
