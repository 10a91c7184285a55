import type { Config } from '../config.ts'
import { openDatabase, writableSessionUrl } from '../db/open.ts'
import type { Log } from '../log.ts'

/**
 * Runs a command on the writable server: the embedded database (started for the command, or
 * shared with a running service) or the session URL (`DATABASE_DIRECT_URL`, else
 * `DATABASE_URL`) narrowed to its one writable host. With none writable it throws, and the
 * command stops with one line that says so.
 */
export async function onWritableDatabase<T>(
  config: Config,
  log: Log,
  command: (url: string) => Promise<T>,
): Promise<T> {
  const db = await openDatabase(config, log, { shareRunning: true })
  try {
    return await command(await writableSessionUrl(config, db))
  } finally {
    await db.stop()
  }
}
