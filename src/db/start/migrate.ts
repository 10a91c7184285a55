import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { limits } from '../../limits.ts'
import { createLog, describeError, type Log } from '../../log.ts'
import { createSql } from '../reach/sql.ts'
import { connectFailure, readError } from '../reach/unavailable.ts'
import { readDatabaseUrl, withQuery } from '../reach/url.ts'

/** The folder of the plain-SQL migrations. */
export const migrationsDir = fileURLToPath(new URL('../../../migrations/', import.meta.url))

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
 * The migrations this code expects that the database has not applied, oldest first: all of them
 * when it has no migrations table. Reads only, so a role that may not create tables can ask.
 */
export function pendingMigrations(databaseUrl: string): Promise<string[]> {
  return onMigrationsSession(databaseUrl, async (sql) => {
    const rows = await sql<{ name: string }[]>`select name from ${sql(migrationsTable)}`.catch(
      (err: unknown) => {
        if (readError(err).undefinedTable) return []
        throw err
      },
    )
    const applied = new Set(rows.map((r) => r.name))
    return migrationNames().filter((name) => !applied.has(name))
  })
}

/** Runs `read` on a session of its own (one connection), ended after. */
async function onMigrationsSession<T>(
  databaseUrl: string,
  read: (sql: ReturnType<typeof createSql>) => Promise<T>,
): Promise<T> {
  // Through createSql: its TLS settings (sslrootcert and its kin) as for every other pool.
  const sql = createSql(
    databaseUrl,
    createLog('error', () => {}),
    {
      max: 1,
      applicationName: 'plant-store migrate',
    },
  )
  try {
    return await read(sql)
  } finally {
    await sql.end({ timeout: 1 })
  }
}

/**
 * Whether every migration this code expects is applied, first and in its order, as
 * node-pg-migrate's own check reads the table (`ORDER BY run_on, id`; migrations a newer
 * version applied after them are fine). False, and the runner decides, on anything else: no
 * table, a migration pending or out of order, or a failed read (the runner's own connection then
 * fails as before, with its message).
 */
async function isCurrent(databaseUrl: string): Promise<boolean> {
  return onMigrationsSession(databaseUrl, async (sql) => {
    const applied = await sql<{ name: string }[]>`
      select name from ${sql('public')}.${sql(migrationsTable)} order by run_on, id`
    return migrationNames().every((name, i) => applied[i]?.name === name)
  }).catch(() => false)
}

/**
 * The URL for node-pg-migrate's `pg`, whose `sslmode=require` (and `prefer`, `verify-ca`)
 * verifies the certificate as `verify-full` does unless asked for libpq's meaning; the
 * service's own pools (postgres.js) take libpq's: `require` encrypts without verifying.
 */
function withLibpqSslModes(url: string): string {
  const { query } = readDatabaseUrl(url)
  if (!query.has('sslmode') || query.has('uselibpqcompat')) return url
  return withQuery(url, (q) => q.set('uselibpqcompat', 'true'))
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
  // Most starts find the schema current: one read says so, and node-pg-migrate (with pg, jiti
  // and glob, about 0.15 s of CPU to load) is loaded only when there is something to do.
  if (direction === 'up' && count === Number.POSITIVE_INFINITY && (await isCurrent(databaseUrl)))
    return []
  const [{ runner }, { default: pg }] = await Promise.all([import('node-pg-migrate'), import('pg')])
  // node-pg-migrate does not await the end of a client it opens itself, nor listen for its
  // errors: a connection dropped just after a run would crash the process. So it gets ours.
  const client = new pg.Client({
    connectionString: withLibpqSslModes(databaseUrl),
    application_name: 'plant-store migrate',
    // Until the server is ready for queries: a port that accepts and never answers (a
    // black-holed database) must not hang the start or the commands.
    connectionTimeoutMillis: limits.database.connect,
  })
  client.on('error', (err) =>
    log.warn('migration connection failed', { error: describeError(err) }),
  )
  await client.connect().catch((err: unknown) => {
    throw connectFailure(err)
  })
  const ran = await runner({
    dbClient: client,
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
  }).finally(() => client.end())
  const names = ran.map((m) => m.name)
  if (names.length > 0)
    log.info(direction === 'up' ? 'migrations up' : 'migrations down', {
      migrations: names.join(', '),
    })
  return names
}
