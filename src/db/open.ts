import { fileURLToPath } from 'node:url'
import type { Config } from '../config.ts'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'
import { describeDatabase, hostUrls } from './database-url.ts'
import { type EmbeddedDatabase, startEmbedded } from './embedded.ts'
import { isWritableHost } from './hosts.ts'
import { migrate, pendingMigrations } from './migrate.ts'

/** The project folder's `.data/`, home of the embedded database and the dev token. */
export const defaultDataDir = fileURLToPath(new URL('../../.data/', import.meta.url))

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

/**
 * The session URL (`DATABASE_DIRECT_URL`, else the database's own) narrowed to its one writable
 * host: migrations and the commands write there, through node-pg-migrate's `pg`, which takes one
 * host. Throws, naming each host and why, when none is writable.
 */
export function writableSessionUrl(config: Config, db: EmbeddedDatabase): Promise<string> {
  return primaryUrl(config.databaseDirectUrl ?? db.url)
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
  // Migrations take a session-level advisory lock: never through a transaction pooler.
  try {
    const url = await writableSessionUrl(config, db)
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
      .catch((stopErr: unknown) => log.error('shutdown step failed', { error: String(stopErr) }))
    throw new Error(
      `cannot use the database at ${describeDatabase(config.databaseDirectUrl ?? db.url)}: ${describeError(err)}`,
    )
  }
  return db
}

/**
 * The URL of the one writable server of a URL with several hosts (the first that is neither in
 * recovery nor read-only), for tools that take one host, such as node-pg-migrate. A URL with one
 * host is returned as it is.
 */
export async function primaryUrl(text: string): Promise<string> {
  const urls = hostUrls(text)
  if (urls === undefined || urls.length < 2) return text
  const problems: string[] = []
  for (const url of urls) {
    url.searchParams.delete('target_session_attrs')
    try {
      // The connector's own question, with the URL's TLS settings.
      if (await isWritableHost(url, limits.database.connect)) return url.toString()
      problems.push(`${url.host} is read-only`)
    } catch (err) {
      problems.push(`${url.host}: ${describeError(err)}`)
    }
  }
  throw new Error(`no writable server among the hosts (${problems.join('; ')})`)
}
