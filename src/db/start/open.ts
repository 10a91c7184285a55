import { fileURLToPath } from 'node:url'
import type { Config } from '../../config.ts'
import { describeError, type Log } from '../../log.ts'
import { type CitusNode, citusNodeOf } from '../node.ts'
import { writableUrl as writableHostUrl } from '../reach/hosts.ts'
import { readError } from '../reach/unavailable.ts'
import { describeDatabase } from '../reach/url.ts'
import { type EmbeddedDatabase, startEmbedded } from './embedded.ts'
import { migrate, pendingMigrations } from './migrate.ts'

/** The project folder's `.data/`, home of the embedded database and the dev token. */
export const defaultDataDir = fileURLToPath(new URL('../../../.data/', import.meta.url))

/** The database this process uses: `DATABASE_URL`, or the embedded one under the data folder. */
export async function openDatabase(
  config: Config,
  log: Log,
  { dataDir = defaultDataDir, shareRunning = false } = {},
): Promise<EmbeddedDatabase> {
  if (config.databaseUrl !== undefined) {
    return { url: config.databaseUrl, owned: false, stop: async () => {} }
  }
  return startEmbedded({ dir: dataDir, log, shareRunning })
}

/** Where sessions go, and the one writable server of that URL. */
export type Sessions = {
  /** The session URL as given (several hosts stay several: the pools fail over). */
  readonly url: string
  /** Its one writable host, for tools that take one (node-pg-migrate's `pg`). */
  readonly writableUrl: string
  /** `DATABASE_URL` names a Citus worker, and `url` is its coordinator. */
  readonly citusWorker: boolean
  /** On a Citus worker, its group in pg_dist_node (its own shards' placements name it). */
  readonly citusGroup?: number
  /**
   * `url` is the coordinator as the worker's pg_dist_node named it at start (no
   * `DATABASE_DIRECT_URL`): the sessions follow its row there when Patroni moves it.
   */
  readonly coordinatorFromMetadata?: boolean
}

/**
 * Where sessions go (migrations, the commands, and the service's tokens and LISTEN):
 * `DATABASE_DIRECT_URL`; else, when `DATABASE_URL` names a Citus worker, its coordinator, where
 * the tables are made and `api_tokens` lives; else the database's own URL. Whether
 * `DATABASE_URL` names a Citus worker is asked in either case, except through a transaction
 * pooler (which a worker's instance does not need: it keeps 1 connection a worker). Throws,
 * naming each host and why, when none is writable (`DatabaseUrlFailure` when it is
 * `DATABASE_URL`'s, with sessions elsewhere). `say`: log, once, what kind of Citus node it is.
 */
export async function sessionsOf(
  config: Config,
  db: EmbeddedDatabase,
  log: Log,
  say = false,
): Promise<Sessions> {
  const direct = config.databaseDirectUrl
  if (db.owned) return { url: db.url, writableUrl: db.url, citusWorker: false }
  const directSessions = async (url: string): Promise<Sessions> => ({
    url,
    writableUrl: await writableHostUrl(url),
    citusWorker: false,
  })
  if (direct !== undefined && config.poolMode === 'transaction') return directSessions(direct)
  let writableUrl: string
  let node: CitusNode | undefined
  try {
    writableUrl = await writableHostUrl(db.url)
    node = await citusNodeOf(writableUrl, log)
  } catch (err) {
    throw direct === undefined ? err : new DatabaseUrlFailure(err)
  }
  if (node?.role === 'worker') {
    const sessions = direct ?? node.coordinator?.url
    if (sessions === undefined)
      throw new Error(
        `this server is a Citus worker whose metadata names no coordinator: on the coordinator, run select citus_set_coordinator_host('<its host>', <its port>), or set DATABASE_DIRECT_URL to it`,
      )
    const where =
      direct === undefined
        ? `the coordinator at ${node.coordinator?.node}`
        : `DATABASE_DIRECT_URL (${describeDatabase(direct)})`
    if (say)
      log.info(
        'this server is a Citus worker: creates go straight to the worker that holds their row; migrations, tokens and their notifications go to the coordinator',
        {
          citus: 'worker',
          through: where,
          ...(node.coordinator && { coordinator: node.coordinator.node }),
        },
      )
    return {
      url: sessions,
      writableUrl: await writableHostUrl(sessions),
      citusWorker: true,
      citusGroup: node.group,
      coordinatorFromMetadata: direct === undefined,
    }
  }
  if (node?.role === 'coordinator' && say)
    log.info('this server is the Citus coordinator', { citus: 'coordinator' })
  if (direct !== undefined) return directSessions(direct)
  return { url: db.url, writableUrl, citusWorker: false }
}

/** `DATABASE_URL` could not be asked what it is, while the sessions go to `DATABASE_DIRECT_URL`. */
export class DatabaseUrlFailure extends Error {
  constructor(cause: unknown) {
    super(describeError(cause), { cause })
  }
}

/** A database prepared for the service, with where its sessions go (found while preparing). */
export type PreparedDatabase = EmbeddedDatabase & { readonly sessions: Sessions }

/**
 * Opens the database (the embedded one when `DATABASE_URL` is unset) and applies pending
 * migrations; if they fail, stops it again and says which database could not be used.
 */
export async function prepareDatabase(
  config: Config,
  log: Log,
  dataDir = defaultDataDir,
): Promise<PreparedDatabase> {
  const db = await openDatabase(config, log, { dataDir })
  let sessions: Sessions
  // Migrations take a session-level advisory lock: never through a transaction pooler.
  try {
    sessions = await sessionsOf(config, db, log, true)
    const url = sessions.writableUrl
    if (config.migrate) await migrate(url, log)
    else {
      // MIGRATE=off: a role that may not create tables; the owner migrates beforehand.
      const pending = await pendingMigrations(url)
      if (pending.length > 0)
        throw new Error(
          `the schema is not current (MIGRATE=off): ${pending.length} migration(s) pending, ${pending.join(', ')}; run npm run migrate as the tables' owner`,
        )
    }
  } catch (err) {
    await db
      .stop()
      .catch((stopErr: unknown) =>
        log.error('shutdown step failed', { error: describeError(stopErr) }),
      )
    throw cannotUse(config, db, err)
  }
  return { ...db, sessions }
}

/**
 * The one-line error for a database that could not be used, naming the server that failed:
 * `DATABASE_URL`'s when it was asked first and failed (`DatabaseUrlFailure`), else where the
 * sessions go (`DATABASE_DIRECT_URL`, else `DATABASE_URL`).
 */
export function cannotUse(config: Config, db: EmbeddedDatabase, err: unknown): Error {
  const failed = err instanceof DatabaseUrlFailure ? db.url : (config.databaseDirectUrl ?? db.url)
  // The driver's error, under whatever wrapped it on the way (a connect failure, the URL's).
  let cause: unknown = err
  let full = readError(cause).diskFull
  while (full === undefined && cause instanceof Error && cause.cause !== undefined) {
    cause = cause.cause
    full = readError(cause).diskFull
  }
  const why =
    full === undefined
      ? describeError(err)
      : `its disk is full (PostgreSQL says "${describeError(err)}"); free space on the database server and start again`
  return new Error(`cannot use the database at ${describeDatabase(failed)}: ${why}`, {
    cause: err,
  })
}
