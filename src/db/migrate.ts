import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { runner } from 'node-pg-migrate'
import type { Log } from '../log.ts'

/** The folder of the plain-SQL migrations. */
export const migrationsDir = fileURLToPath(new URL('../../migrations/', import.meta.url))

/** The table in which node-pg-migrate records the migrations it ran. */
export const migrationsTable = 'pgmigrations'

/** The names of the migrations this code expects, oldest first (file names without `.sql`). */
export function migrationNames(): string[] {
  return readdirSync(migrationsDir)
    .filter((f) => f.endsWith('.sql'))
    .map((f) => f.slice(0, -'.sql'.length))
    .sort()
}

/**
 * Applies pending migrations (or undoes `count` of them). Concurrent migrators wait for
 * node-pg-migrate's advisory lock instead of failing, so several instances may start at once.
 */
export async function migrate(
  databaseUrl: string,
  log: Log,
  direction: 'up' | 'down' = 'up',
  count = direction === 'up' ? Number.POSITIVE_INFINITY : 1,
): Promise<string[]> {
  const ran = await runner({
    databaseUrl,
    dir: migrationsDir,
    migrationsTable,
    direction,
    count,
    singleTransaction: true,
    advisoryLockMode: 'wait',
    checkOrder: true,
    logger: {
      debug: (msg: string) => log.debug(msg),
      info: (msg: string) => log.debug(msg),
      warn: (msg: string) => log.warn(msg),
      error: (msg: string) => log.error(msg),
    },
  })
  const names = ran.map((m) => m.name)
  if (names.length > 0) log.info(`migrations ${direction}`, { migrations: names.join(', ') })
  return names
}
