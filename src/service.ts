import cluster from 'node:cluster'
import { writeFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import type { Sql } from 'postgres'
import { createApp } from './app.ts'
import { createTokenCache } from './auth/token-cache.ts'
import { createToken, hasAnyToken } from './auth/token-repository.ts'
import type { Config } from './config.ts'
import { defaultDataDir, openDatabase } from './database.ts'
import { describeDatabase, primaryUrl } from './db/database-url.ts'
import type { EmbeddedDatabase } from './db/embedded.ts'
import { migrate } from './db/migrate.ts'
import { createSql, databaseLimits, leaveReadOnlyServer } from './db/sql.ts'
import type { Log } from './log.ts'
import { createMetrics, noMetrics } from './metrics.ts'
import { createPlantRepository } from './plants/repository.ts'

/** A running service. */
export type Service = {
  /** Base URL the service listens on. */
  readonly url: string
  /** Stops accepting, finishes requests in flight (at most `graceMs`), releases everything. */
  readonly close: (graceMs?: number) => Promise<void>
}

/**
 * Starts the whole service: database (embedded when `DATABASE_URL` is unset), migrations, token
 * cache, HTTP server. Whatever was started is released again if a later step fails.
 */
export async function startService(
  config: Config,
  log: Log,
  dataDir = defaultDataDir,
): Promise<Service> {
  const cleanups: (() => Promise<void>)[] = []
  const release = async () => {
    for (const cleanup of cleanups.reverse())
      await cleanup().catch((err: unknown) =>
        log.error('shutdown step failed', { error: String(err) }),
      )
  }
  try {
    // With WORKERS, the primary has prepared the database before it started this worker.
    const db = cluster.isWorker
      ? await openDatabase(config, log, { dataDir })
      : await prepareDatabase(config, log, dataDir)
    cleanups.push(db.stop)
    const sessionUrl = config.databaseDirectUrl ?? db.url
    const metrics = config.metrics ? createMetrics({ clusterWorker: cluster.isWorker }) : noMetrics
    const transactionPooler = config.poolMode === 'transaction'
    const sql = createSql(db.url, log, {
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
    if (db.owned) await ensureDevToken(sql, dataDir, log)
    const tokens = createTokenCache(sql, log, undefined, listenSql)
    await tokens.start()
    cleanups.push(tokens.close)
    const store = createPlantRepository(sql, undefined, {
      statementRan: metrics.statementRan,
      readOnly: leaveReadOnlyServer(sql, log),
    })
    const server = createApp({
      sql,
      store,
      tokens,
      log,
      metrics,
      traceContext: config.traceContext,
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(config.port, config.host, () => resolve())
    })
    const { port } = server.address() as AddressInfo
    const host = config.host.includes(':') ? `[${config.host}]` : config.host
    const url = `http://${host}:${port}`
    // With WORKERS, the primary says where the service listens once every worker does.
    if (cluster.isWorker) log.info(`worker ready on ${url}`, { pid: process.pid })
    else log.info(`listening on ${url}`, { host: config.host, port })
    let closing: Promise<void> | undefined
    return {
      url,
      close(graceMs = 10_000) {
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

/**
 * With the embedded database and no token yet: creates the first token, named dev, saves it in
 * the data folder and logs it, so that a newcomer can make a request at once.
 */
export async function ensureDevToken(sql: Sql, dataDir: string, log: Log): Promise<void> {
  if (await hasAnyToken(sql)) return
  const created = await createToken(sql, 'dev')
  if (!('token' in created)) return
  const file = join(dataDir, 'dev-token')
  await writeFile(file, `${created.token}\n`, { mode: 0o600 })
  log.info(`created the first API token, named dev; it is saved in ${file}`, {
    devToken: created.token,
  })
}

/**
 * Opens the database (the embedded one when `DATABASE_URL` is unset) and applies pending
 * migrations; if they fail, stops it again and says which database could not be used.
 */
export async function prepareDatabase(
  config: Config,
  log: Log,
  dataDir = defaultDataDir,
): Promise<EmbeddedDatabase> {
  const db = await openDatabase(config, log, { dataDir })
  // Migrations take a session-level advisory lock: never through a transaction pooler. Their
  // driver takes one host: of several, the writable one.
  const sessionUrl = config.databaseDirectUrl ?? db.url
  try {
    await migrate(await primaryUrl(sessionUrl), log)
  } catch (err) {
    await db
      .stop()
      .catch((stopErr: unknown) => log.error('shutdown step failed', { error: String(stopErr) }))
    throw new Error(
      `cannot use the database at ${describeDatabase(sessionUrl)}: ${err instanceof Error ? err.message : String(err)}`,
    )
  }
  return db
}

// Through a transaction pooler the service cannot set statement_timeout per session; the role or
// database should carry the contract's 5 s.
async function warnWithoutStatementTimeout(sql: Sql, log: Log): Promise<void> {
  const [row] = await sql<{ ms: number }[]>`
    select setting::int * case unit when 's' then 1000 else 1 end as ms
    from pg_settings where name = 'statement_timeout'`
  const ms = row?.ms ?? 0
  if (ms === 0 || ms > databaseLimits.statement) {
    log.warn(
      `statement_timeout is ${ms === 0 ? 'off' : `${ms} ms`} through the pooler; set it on the role or database: ALTER ROLE … SET statement_timeout = '5s'`,
    )
  }
}

// Stop accepting; let requests in flight finish, closing each connection as it goes idle; after
// `graceMs` close whatever is left.
async function drain(server: import('node:http').Server, graceMs: number, log: Log): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()))
  const sweep = setInterval(() => server.closeIdleConnections(), 50)
  let timer: ReturnType<typeof setTimeout> | undefined
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), graceMs)
  })
  if ((await Promise.race([closed, late])) === 'late') {
    log.warn(`requests still running after ${graceMs} ms were cut off`)
    server.closeAllConnections()
    await closed
  }
  clearInterval(sweep)
  clearTimeout(timer)
}
