import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Sql } from 'postgres'
import type { Log } from '../log.ts'
import { isFailure } from '../outcome.ts'
import { createToken, hasAnyToken } from './token-repository.ts'

/** The name of the embedded database's first token. */
export const devTokenName = 'dev'

/**
 * With the embedded database and no token yet: creates the first token, named dev, saves it in
 * the data folder and logs it, so that a newcomer can make a request at once. It never expires:
 * it exists only beside the embedded database of this checkout (bound to 127.0.0.1 unless HOST
 * says otherwise), and the README's commands must work after any time away. The start-up
 * warning about tokens that never expire leaves it out there (and names any other).
 */
export async function ensureDevToken(sql: Sql, dataDir: string, log: Log): Promise<void> {
  if (await hasAnyToken(sql)) return
  const created = await createToken(sql, devTokenName, null)
  if (isFailure(created)) return
  const file = join(dataDir, 'dev-token')
  await writeFile(file, `${created}\n`, { mode: 0o600 })
  log.info('created the first API token, named dev, and saved it in its file', {
    file,
    devToken: created,
  })
}
