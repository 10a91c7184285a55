import process from 'node:process'
import type { Config } from '../config.ts'
import { migrate } from '../db/start/migrate.ts'
import type { Log } from '../log.ts'
import { onWritableDatabase } from './database.ts'

/** `npm run migrate [-- up | down [N]]`: applies pending migrations or undoes N. */
export async function migrateCommand(
  config: Config,
  log: Log,
  args: readonly string[],
): Promise<number> {
  const [direction = 'up', countText] = args
  const count = countText === undefined ? undefined : Number(countText)
  if (
    (direction !== 'up' && direction !== 'down') ||
    (count !== undefined && !(Number.isInteger(count) && count > 0))
  ) {
    process.stderr.write('usage: npm run migrate [-- up | down [N]]\n')
    return 1
  }
  const ran = await onWritableDatabase(config, log, (url) => migrate(url, log, direction, count))
  process.stdout.write(
    ran.length === 0 ? 'no migrations to run\n' : `${direction}: ${ran.join(', ')}\n`,
  )
  return 0
}
