import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { parseConfig } from '../../src/config.ts'
import { createLog } from '../../src/log.ts'
import { startService } from '../../src/service.ts'
import { type Cleanup, createTestDatabase } from '../helpers/database.ts'
import { partitionUnavailable } from '../helpers/partition.ts'
import { type Arranged, partitionAndRecover } from '../helpers/partition-run.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from '../helpers/pgbouncer.ts'
import { tokenFor } from '../helpers/process.ts'
import { connect, startPrimaryAndStandby } from '../helpers/replication.ts'

// The same partition as in network-partition.test.ts, on the other ways to the database: between
// the service and PgBouncer, and between the service and the primary of a multi-host URL. Outside
// CI a machine that cannot cut a port off, or has no PgBouncer, skips with the reason.
const unavailable =
  partitionUnavailable() ?? (pgbouncerPresent ? undefined : `no PgBouncer at ${pgbouncerPath}`)
const skip = unavailable !== undefined && !process.env.CI ? unavailable : false

async function serviceOn(url: string, env: Record<string, string>, t: Cleanup) {
  const logs: Record<string, unknown>[] = []
  const log = createLog('debug', (l) => logs.push(JSON.parse(l) as Record<string, unknown>))
  const service = await startService(parseConfig({ DATABASE_URL: url, PORT: '0', ...env }), log)
  t.after(() => service.close(0))
  return { service, logs }
}

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

/**
 * The service on a URL listing a primary and its standby; its way to the primary (on 127.0.0.2)
 * is the one cut, while replication (on 127.0.0.1) goes on.
 */
async function onFailoverUrl(t: Cleanup): Promise<Arranged> {
  const { primary, standby } = await startPrimaryAndStandby(t)
  const hosts = `127.0.0.2:${primary.port},127.0.0.1:${standby.port}`
  const { service, logs } = await serviceOn(
    `postgres://postgres@${hosts}/plants?target_session_attrs=read-write`,
    {},
    t,
  )
  const check = connect(primary.port)
  t.after(() => check.end({ timeout: 1 }))
  const token = await tokenFor(check, service.url, 'partition-failover')
  return {
    base: service.url,
    token,
    store: service.store,
    logs,
    port: primary.port,
    address: '127.0.0.2',
    check,
  }
}

describe('a silent network partition on the other ways to the database', () => {
  for (const [what, arrange] of [
    ['between the service and PgBouncer', throughPgBouncer],
    ['between the service and the primary of a multi-host URL', onFailoverUrl],
  ] as const) {
    test(`20 s ${what}, both ways: 200 within 5 s of the heal, /readyz 503 (answered within 2 s) until creates succeed, nothing lost`, {
      skip,
      timeout: 120_000,
    }, async (t) => {
      assert.equal(unavailable, undefined, unavailable)
      await partitionAndRecover(t, await arrange(t), 20, 'both')
    })
  }
})
