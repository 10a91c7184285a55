import cluster, { type Worker } from 'node:cluster'
import type { Sql } from 'postgres'
import { prepareTokens } from './auth/start-tokens.ts'
import type { Config } from './config.ts'
import { createSql } from './db/reach/sql.ts'
import type { EmbeddedDatabase } from './db/start/embedded.ts'
import { defaultDataDir, type PreparedDatabase, prepareDatabase } from './db/start/open.ts'
import { limits } from './limits.ts'
import { describeError, type Log } from './log.ts'
import { answerMetricsRequests } from './metrics/cluster.ts'

// WORKERS=N: a primary process that owns the database set-up (the embedded PostgreSQL,
// migrations, the dev token) and N worker processes that share the port (node:cluster). Each
// worker is a whole service of its own: its own pool, token cache (with its own LISTEN, so a
// revocation reaches every worker), batching and metrics; the primary adds the workers' metrics
// up for GET /metrics.

/** Runs the primary until SIGINT or SIGTERM; resolves with the exit status. */
export async function runPrimary(
  config: Config,
  log: Log,
  stopped: Promise<string>,
  stopRequested: () => string | undefined = () => undefined,
  dataDir = defaultDataDir,
): Promise<number> {
  // Each worker accepts its connections itself from the shared socket (SCHED_NONE), not from
  // the primary (Node's round robin on Linux). The primary hands a connection to a worker and
  // keeps it open until the worker says it took it; a worker killed meanwhile never says so, and
  // the client waits for ever on a connection nobody serves. A worker's own connections close
  // with it. Node's own NODE_CLUSTER_SCHED_POLICY=rr still chooses round robin (docs/scaling.md).
  if (!config.nodeSchedulingPolicy) cluster.schedulingPolicy = cluster.SCHED_NONE
  let db: EmbeddedDatabase
  try {
    db = await prepareOnce(config, log, dataDir)
  } catch (err) {
    // A start that fails says so one way, whatever failed: as serve.ts says it.
    log.error('the service did not start', { error: describeError(err) })
    return stopRequested() === undefined ? 1 : 0
  }
  const early = stopRequested()
  if (early !== undefined) {
    log.info('a signal came during start-up; stopping', { signal: early })
    await db.stop()
    log.info('stopped')
    return 0
  }
  // Workers read their settings from the environment as any process does; the embedded
  // database's URL is the one thing the primary adds.
  const env = config.databaseUrl === undefined ? { DATABASE_URL: db.url } : {}
  const started = new Map<Worker, number>()
  const state = { stopping: false }
  const fork = () => {
    const worker = cluster.fork(env)
    started.set(worker, performance.now())
    return worker
  }
  answerMetricsRequests()

  let url: string
  try {
    url = await startWorkers(config, fork)
  } catch (err) {
    log.error('the service did not start', { error: describeError(err) })
    state.stopping = true
    await stopWorkers(log)
    await db.stop()
    return 1
  }
  log.info('listening', { url, workers: config.workers, pid: process.pid })
  replaceDeadWorkers(log, fork, started, state)

  const signal = await stopped
  state.stopping = true
  if (signal === 'SIGTERM')
    log.info(
      'signal received; every worker serves for the drain delay (DRAIN_DELAY) with /readyz 503, then finishes its requests in flight',
      { signal, drainDelayMs: config.drainDelay },
    )
  else
    log.info('signal received; every worker finishes its requests in flight', {
      signal,
      atMostMs: limits.drain,
    })
  const clean = await stopWorkers(log, signal === 'SIGINT' ? 'SIGINT' : 'SIGTERM')
  await db.stop()
  log.info('stopped')
  return clean ? 0 : 1
}

/**
 * The database set-up done once for all workers: migrations, the dev token when embedded, and
 * the warnings about tokens (at start, then daily), which keep a connection of their own until
 * the database is stopped. Throws, having released what it opened, when a step fails.
 */
async function prepareOnce(config: Config, log: Log, dataDir: string): Promise<EmbeddedDatabase> {
  let db: PreparedDatabase | undefined
  let sql: Sql | undefined
  try {
    db = await prepareDatabase(config, log, dataDir)
    // Where api_tokens lives: on a Citus worker, its coordinator.
    sql = createSql(db.sessions.url, log, { max: 1, applicationName: 'plant-store primary' })
    const stopWatching = await prepareTokens(sql, log, { embedded: db.owned, dataDir })
    const { stop } = db
    const ownSql = sql
    return {
      ...db,
      async stop() {
        stopWatching()
        await ownSql.end({ timeout: 5 })
        await stop()
      },
    }
  } catch (err) {
    await sql?.end({ timeout: 5 })
    await db?.stop()
    throw err
  }
}

/** Forks every worker; resolves with the URL once all listen, or rejects at the first exit. */
function startWorkers(config: Config, fork: () => Worker): Promise<string> {
  const all = Array.from({ length: config.workers }, fork)
  return new Promise<string>((resolve, reject) => {
    let listening = 0
    const onListening = (_: Worker, address: { address: string | null; port: number }) => {
      // Each worker's METRICS_PORT server listens too; only the service's port counts.
      if (address.port === config.metricsPort) return
      if (++listening === all.length) {
        cleanup()
        const host = config.host.includes(':') ? `[${config.host}]` : config.host
        resolve(`http://${host}:${address.port}`)
      }
    }
    const onExit = (worker: Worker, code: number | null, signal: string | null) => {
      cleanup()
      reject(
        new Error(`worker ${worker.id} exited with ${signal ?? `code ${code}`} before it listened`),
      )
    }
    const cleanup = () => {
      cluster.off('listening', onListening)
      cluster.off('exit', onExit)
    }
    cluster.on('listening', onListening)
    cluster.on('exit', onExit)
  })
}

/** A worker that dies is replaced; one that died soon after its start, after a second. */
function replaceDeadWorkers(
  log: Log,
  fork: () => Worker,
  started: Map<Worker, number>,
  state: { readonly stopping: boolean },
): void {
  cluster.on('exit', (worker, code, signal) => {
    if (state.stopping) return
    const lived = performance.now() - (started.get(worker) ?? 0)
    started.delete(worker)
    const again = lived < limits.workers.quickDeath ? limits.workers.restartPause : 0
    log.error('a worker exited; starting a new one', {
      worker: worker.id,
      pid: worker.process.pid,
      code: code ?? undefined,
      signal: signal ?? undefined,
      restartInMs: again,
    })
    setTimeout(() => {
      if (state.stopping) return
      const replacement = fork()
      replacement.once('listening', () =>
        log.info('a new worker replaces the one that exited', {
          worker: replacement.id,
          pid: replacement.process.pid,
          replaced: worker.id,
        }),
      )
    }, again).unref()
  })
}

/** Sends SIGTERM to every worker and waits for all of them; whether all exited with 0. */
async function stopWorkers(log: Log, signal: 'SIGINT' | 'SIGTERM' = 'SIGTERM'): Promise<boolean> {
  const workers = Object.values(cluster.workers ?? {}).filter((w) => w !== undefined)
  const exits = workers.map(
    (worker) =>
      new Promise<boolean>((resolve) => {
        if (worker.isDead()) return resolve(true)
        worker.once('exit', (code, signal) => {
          if (code !== 0)
            log.warn('a worker exited with an error while stopping', {
              worker: worker.id,
              code: code ?? undefined,
              signal: signal ?? undefined,
            })
          resolve(code === 0)
        })
        worker.process.kill(signal)
      }),
  )
  return (await Promise.all(exits)).every(Boolean)
}
