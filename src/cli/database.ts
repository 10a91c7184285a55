import type { Sql } from 'postgres'
import type { Config } from '../config.ts'
import { createSql } from '../db/reach/sql.ts'
import { migrate } from '../db/start/migrate.ts'
import { cannotUse, openDatabase, sessionsOf } from '../db/start/open.ts'
import type { Log } from '../log.ts'

/**
 * Runs a command on the writable server: the embedded database (started for the command, or
 * shared with a running service) or the session URL (`DATABASE_DIRECT_URL`, else the
 * coordinator of a Citus worker, else `DATABASE_URL`) narrowed to its one writable host; on
 * Citus it says which node that is (a worker's coordinator is the one its pg_dist_node names
 * now: Patroni's current primary of group 0). With none writable it throws, and the command
 * stops with one line that says so.
 */
export async function onWritableDatabase<T>(
  config: Config,
  log: Log,
  command: (url: string) => Promise<T>,
): Promise<T> {
  const db = await openDatabase(config, log, { shareRunning: true })
  try {
    return await command((await sessionsOf(config, db, log, true)).writableUrl)
  } catch (err) {
    throw cannotUse(config, db, err)
  } finally {
    await db.stop()
  }
}

/**
 * Runs a command on a session of the writable server once its migrations are applied (the
 * commands that write tables: token, grant), and ends the session after.
 */
export function onMigratedSession<T>(
  config: Config,
  log: Log,
  applicationName: string,
  command: (sql: Sql) => Promise<T>,
): Promise<T> {
  return onWritableDatabase(config, log, async (url) => {
    await migrate(url, log)
    const sql = createSql(url, log, { max: 1, applicationName })
    try {
      return await command(sql)
    } finally {
      await sql.end({ timeout: 5 })
    }
  })
}
