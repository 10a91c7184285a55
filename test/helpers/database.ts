import { randomBytes } from 'node:crypto'
import postgres, { type Sql } from 'postgres'
import { migrate } from '../../src/db/start/migrate.ts'
import { createLog } from '../../src/log.ts'

/** Where cleanups are registered: node:test's `after`, or a test context. */
export type Cleanup = { after: (fn: () => unknown) => void }

/** A fresh database of its own for one test file, on the suite's PostgreSQL. */
export type TestDatabase = { url: string; sql: Sql }

/** The suite's PostgreSQL server, set by `test/run.ts`. */
export function serverUrl(): string {
  const url = process.env.TEST_DATABASE_URL
  if (!url) throw new Error('TEST_DATABASE_URL is not set: run the tests with `npm test`')
  return url
}

export const quietLog = createLog('error', (line) => process.stderr.write(line))

/** The URL of database `name` on `server`. */
function urlOf(server: string, name: string): string {
  const url = new URL(server)
  url.pathname = `/${name}`
  return url.toString()
}

/**
 * Makes a migrated database on the suite's server for the run to copy (`test/run.ts`, which
 * names it to the test files in PLANT_STORE_TEST_TEMPLATE and drops it at the end): a copy costs
 * the server about 30 ms of CPU where running the migrations cost 100 to 160, and a test process
 * that only copies never loads node-pg-migrate (0.25 s of CPU).
 */
export async function createTemplateDatabase(server: string): Promise<{
  name: string
  drop: () => Promise<void>
}> {
  const name = `plant_test_template_${randomBytes(6).toString('hex')}`
  const admin = postgres(server, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database ${name}`)
  await migrate(urlOf(server, name), quietLog)
  return {
    name,
    drop: async () => {
      await admin.unsafe(`drop database if exists ${name} with (force)`)
      await admin.end({ timeout: 5 })
    },
  }
}

/**
 * Creates an empty database (migrated unless `migrated: false`: a copy of the run's migrated
 * template when `test/run.ts` made one, else migrated here) and drops it after the test or suite
 * `t` ends.
 */
export async function createTestDatabase(
  t: Cleanup,
  { migrated = true } = {},
): Promise<TestDatabase> {
  const name = `plant_test_${randomBytes(6).toString('hex')}`
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} })
  const template = migrated ? process.env.PLANT_STORE_TEST_TEMPLATE : undefined
  await admin.unsafe(`create database ${name}${template ? ` template ${template}` : ''}`)
  const url = urlOf(serverUrl(), name)
  const sql = postgres(url, { max: 4, onnotice: () => {} })
  t.after(async () => {
    await sql.end({ timeout: 5 })
    await admin.unsafe(`drop database if exists ${name} with (force)`)
    await admin.end({ timeout: 5 })
  })
  if (migrated && !template) await migrate(url, quietLog)
  return { url, sql }
}

/**
 * Locks `plants` against inserts on a connection of the test's own, so that creates stay in
 * flight (or time out) until the returned function commits and releases it.
 */
export async function holdPlantsLock(sql: Sql): Promise<() => Promise<void>> {
  const locker = await sql.reserve()
  await locker`begin`
  await locker`lock table plants in share row exclusive mode`
  return async () => {
    await locker`commit`
    locker.release()
  }
}

/**
 * The service's inserts into plants running on `sql`'s database now: all of them, or those
 * waiting on `wait` (`Lock`: behind a lock such as `holdPlantsLock`'s).
 */
export async function insertsRunning(sql: Sql, wait?: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and state = 'active' and pid <> pg_backend_pid()
      and query ilike '%insert into plants%'
      and (${wait ?? null}::text is null or wait_event_type = ${wait ?? null})`
  return row?.n ?? 0
}
