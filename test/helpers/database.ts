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

/**
 * Creates an empty database (migrated unless `migrated: false`) and drops it after the test or
 * suite `t` ends.
 */
export async function createTestDatabase(
  t: Cleanup,
  { migrated = true } = {},
): Promise<TestDatabase> {
  const name = `plant_test_${randomBytes(6).toString('hex')}`
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database ${name}`)
  const url = new URL(serverUrl())
  url.pathname = `/${name}`
  const sql = postgres(url.toString(), { max: 4, onnotice: () => {} })
  t.after(async () => {
    await sql.end({ timeout: 5 })
    await admin.unsafe(`drop database if exists ${name} with (force)`)
    await admin.end({ timeout: 5 })
  })
  if (migrated) await migrate(url.toString(), quietLog)
  return { url: url.toString(), sql }
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
