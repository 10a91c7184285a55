import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type Cleanup, createTestDatabase } from '../helpers/database.ts'
import { partitionUnavailable } from '../helpers/partition.ts'
import {
  type Arranged,
  onFailoverUrl,
  partitionAndRecover,
  serviceOn,
} from '../helpers/partition-run.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from '../helpers/pgbouncer.ts'
import { tokenFor } from '../helpers/process.ts'

// The same partition as in network-partition.test.ts, on the other ways to the database: between
// the service and PgBouncer, and between the service and the primary of a multi-host URL. Outside
// CI a machine that cannot cut a port off, or has no PgBouncer, skips with the reason.
const unavailable =
  partitionUnavailable() ?? (pgbouncerPresent ? undefined : `no PgBouncer at ${pgbouncerPath}`)
const skip = unavailable !== undefined && !process.env.CI ? unavailable : false

/** The service through PgBouncer in transaction mode; the pooler's port is the one cut. */
async function throughPgBouncer(t: Cleanup): Promise<Arranged> {
  const db = await createTestDatabase(t)
  const name = new URL(db.url).pathname.slice(1)
  await db.sql.unsafe(`alter database ${name} set statement_timeout = '5s'`)
  const bouncer = await startPgBouncer(db.url, t, { poolSize: 4 })
  const { service, logs } = await serviceOn(
    bouncer.url,
    { DATABASE_POOL_MODE: 'transaction', DATABASE_DIRECT_URL: db.url },
    t,
  )
  const token = await tokenFor(db.sql, service.url, 'partition-pgbouncer')
  return { base: service.url, token, store: service.store, logs, port: bouncer.port, check: db.sql }
}

// Each test cuts a port of its own (a PgBouncer's, a primary's): the two run at once. Each
// takes 40 to 44 s as the only file beside a busy core, and up to 126 s in `npm test` beside it
// (2026-12-02): 180 s is a hang.
describe('a silent network partition on the other ways to the database', { concurrency: 2 }, () => {
  for (const [what, arrange] of [
    ['between the service and PgBouncer', throughPgBouncer],
    ['between the service and the primary of a multi-host URL', (t: Cleanup) => onFailoverUrl(t)],
  ] as const) {
    test(`20 s ${what}, both ways: 200 within 5 s of the heal, /readyz 503 (answered within 2 s) until creates succeed, nothing lost`, {
      skip,
      timeout: 180_000,
    }, async (t) => {
      assert.equal(unavailable, undefined, unavailable)
      await partitionAndRecover(t, await arrange(t), 20, 'both')
    })
  }
})
