import { fileURLToPath } from 'node:url'
import type { Config } from './config.ts'
import { type EmbeddedDatabase, startEmbedded } from './db/embedded.ts'
import type { Log } from './log.ts'

/** The project folder's `.data/`, home of the embedded database and the dev token. */
export const defaultDataDir = fileURLToPath(new URL('../.data/', import.meta.url))

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
