import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { migrate } from '../../src/db/start/migrate.ts'
import { limits } from '../../src/limits.ts'
import { createTestDatabase, quietLog } from '../helpers/database.ts'
import {
  type Drive,
  driveCreates,
  lostAcknowledgements,
  pastTheFault,
  underWay,
} from '../helpers/drive.ts'
import { partition, partitionSkip, partitionUnavailable } from '../helpers/partition.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from '../helpers/pgbouncer.ts'
import { startRestartableServer } from '../helpers/replication.ts'
import { startTestServer, type TestServer, uniqueId } from '../helpers/server.ts'
import { startTcpProxy } from '../helpers/tcp-proxy.ts'
import { sleep, within } from '../helpers/wait.ts'

// A gap in the database shorter than the request deadline (a restart, terminated backends, an
// answer lost after its commit) is waited out: each create is held and sent again, since the id
// makes that safe, and no client sees it.

/** What a drive under a gap must show: no 503, no failed request, none slower than allowed. */
function assertNoGapSeen(drive: Drive, what: string): void {
  const statuses = JSON.stringify(Object.fromEntries(drive.statuses))
  process.stderr.write(
    `# ${what}: ${drive.acknowledged.length} creates answered 200, statuses ${statuses}, slowest ${Math.round(drive.slowestMs)} ms\n`,
  )
  assert.deepEqual([...drive.statuses.keys()], [200], `statuses: ${statuses}`)
  assert.ok(
    drive.slowestMs <= limits.database.request + 500,
    `the slowest answer took ${Math.round(drive.slowestMs)} ms`,
  )
}

/** The service's log lines that open and close a gap. */
function gapLines(s: TestServer) {
  return {
    began: s.logs.filter((l) => String(l.message).startsWith('the database is unavailable')),
    ended: s.logs.filter((l) => String(l.message).startsWith('the database took creates again')),
  }
}

/**
 * The service on a PostgreSQL server of its own (migrated, with a pool of the test's), which the
 * test may restart or cut off without touching the other files' databases.
 */
async function serviceOnOwnServer() {
  const server = await startRestartableServer({ after })
  await migrate(server.url, quietLog)
  const sql = postgres(server.url, { max: 2, onnotice: () => {} })
  server.cleanup.after(() => sql.end())
  const s = await startTestServer(server.cleanup, { db: { url: server.url, sql } })
  return { server, sql, s }
}

describe('gaps in the database shorter than the deadline', () => {
  test('every backend terminated, three times under 8 keep-alive clients: no create answered 503, none lost', async () => {
    const s = await startTestServer({ after })
    const drive = driveCreates(s.base, s.token, { concurrency: 8 })
    for (let i = 0; i < 3; i++) {
      await sleep(400)
      const ended = await s.db.sql`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name = 'plant-store' and datname = current_database()
          and pid <> pg_backend_pid()`
      assert.ok(ended.length > 0, 'no session of the service was found')
    }
    await sleep(400)
    await drive.stop()
    assertNoGapSeen(drive, 'backends terminated')
    assert.deepEqual(await lostAcknowledgements(s.db.sql, drive.acknowledged), [])
    // A gap's end is told once statements have gone through for a second with no failure.
    await within(3000, async () => gapLines(s).ended.length > 0)
    const { began, ended } = gapLines(s)
    assert.ok(began.length > 0, 'no line told of the gap')
    assert.ok(
      began.every((l) => ['terminated', 'connection_lost'].includes(String(l.reason))),
      JSON.stringify(began),
    )
    assert.ok(ended.length > 0 && ended.every((l) => l.unavailable === 0), JSON.stringify(ended))
    // One line per gap, not one per create.
    assert.ok(began.length <= 3, `${began.length} lines for three gaps`)
    const metrics = await (await fetch(`${s.base}/metrics`)).text()
    const resent = metrics
      .split('\n')
      .filter((l) =>
        /^plant_store_creates_resent_total\{reason="(terminated|connection_lost)"\}/.test(l),
      )
      .reduce((sum, l) => sum + Number(l.split(' ')[1]), 0)
    assert.ok(resent > 0, 'no resend was counted')
    assert.match(metrics, /plant_store_create_held_seconds_count\{outcome="answered"\} [1-9]/)
  })

  test('PostgreSQL restarted fast (pg_ctl restart -m fast), down for 1.5 s, under 8 keep-alive clients: no create answered 503, none lost', async () => {
    const { server, sql, s } = await serviceOnOwnServer()
    const drive = driveCreates(s.base, s.token, { concurrency: 8 })
    await underWay(drive)
    // As long as a restart of a server with work to recover takes (1.4 to 1.8 s measured).
    const gapMs = await server.restartFast({ downMs: 1500 })
    await pastTheFault(drive, performance.now())
    await drive.stop()
    process.stderr.write(`# fast restart: no connections for ${Math.round(gapMs)} ms\n`)
    assertNoGapSeen(drive, 'fast restart')
    assert.deepEqual(await lostAcknowledgements(sql, drive.acknowledged), [])
    await within(3000, async () => gapLines(s).ended.length > 0)
    const { began, ended } = gapLines(s)
    assert.equal(began.length, 1, JSON.stringify(began))
    assert.ok(
      ended.some((l) => Number(l.held) > 0 && Number(l.resent) >= Number(l.held)),
      JSON.stringify(ended),
    )
  })

  test('PgBouncer restarted (transaction mode) under 8 keep-alive clients: no create answered 503, none lost', async () => {
    assert.ok(pgbouncerPresent, `needs ${pgbouncerPath} (apt-get install pgbouncer)`)
    const db = await createTestDatabase({ after })
    const name = new URL(db.url).pathname.slice(1)
    // Through the pooler the service cannot send statement_timeout; the database carries it.
    await db.sql.unsafe(`alter database ${name} set statement_timeout = '5s'`)
    const bouncer = await startPgBouncer(db.url, { after })
    const s = await startTestServer(
      { after },
      {
        db: { url: bouncer.url, sql: db.sql },
        env: { DATABASE_POOL_MODE: 'transaction', DATABASE_DIRECT_URL: db.url },
      },
    )
    const drive = driveCreates(s.base, s.token, { concurrency: 8 })
    await underWay(drive)
    const gapMs = await bouncer.restart()
    await pastTheFault(drive, performance.now())
    await drive.stop()
    process.stderr.write(`# PgBouncer restart: no connections for ${Math.round(gapMs)} ms\n`)
    assertNoGapSeen(drive, 'PgBouncer restart')
    assert.deepEqual(await lostAcknowledgements(db.sql, drive.acknowledged), [])
    // A restart that no statement meets costs nothing (a CI run saw no failed statement at
    // all): there may be no gap, but one that began is told to have ended.
    await within(3000, async () => {
      const { began, ended } = gapLines(s)
      return began.length === ended.length
    })
  })

  test('a 3-s silent partition (its packets dropped both ways) under 8 keep-alive clients: no create answered 503, none lost', {
    skip: partitionSkip(),
  }, async (t) => {
    const missing = partitionUnavailable()
    if (missing !== undefined) throw new Error(missing)
    const { server, sql, s } = await serviceOnOwnServer()
    const drive = driveCreates(s.base, s.token, { concurrency: 8 })
    await underWay(drive)
    const cut = partition(server.port, 'both', t)
    await sleep(3000)
    cut.heal()
    await pastTheFault(drive, performance.now())
    await drive.stop()
    assertNoGapSeen(drive, '3-s partition')
    assert.deepEqual(await lostAcknowledgements(sql, drive.acknowledged), [])
  })

  test("a statement sent into a silent partition is cut loose once the server's kernel has acknowledged none of it for 1 s, and sent again on a new connection: a 3.5-s partition answered 200, not 503", {
    skip: partitionSkip(),
  }, async (t) => {
    const missing = partitionUnavailable()
    if (missing !== undefined) throw new Error(missing)
    const { server, sql, s } = await serviceOnOwnServer()
    // The slots' connections are open: the create's statement is sent into the partition. The
    // kernel retransmits it 0.2, 0.6, 1.4 and 3.0 s after the send, and next at 6.2 s, past the
    // deadline: only a new connection gets it through within it.
    assert.equal((await s.post({ id: uniqueId(), name: 'before' })).status, 200)
    const cut = partition(server.port, 'both', t)
    const id = uniqueId()
    const sent = performance.now()
    const answer = s.post({ id, name: 'into the partition' })
    await sleep(3500)
    cut.heal()
    const res = await answer
    const ms = performance.now() - sent
    const line = s.logs.find((l) =>
      String(l.message).startsWith('the database acknowledged nothing of a statement'),
    )
    t.diagnostic(
      `answered ${res.status} after ${Math.round(ms)} ms; cut loose after ${line?.ms} ms`,
    )
    assert.equal(res.status, 200, `answered ${res.status} after ${Math.round(ms)} ms`)
    assert.ok(ms <= limits.database.request, `answered after ${Math.round(ms)} ms`)
    assert.ok(line !== undefined, JSON.stringify(s.logs.map((l) => l.message)))
    assert.ok(
      Number(line.ms) >= limits.database.unacknowledged && Number(line.ms) < 3000,
      JSON.stringify(line),
    )
    assert.equal((await sql`select 1 from plants where id = ${id}`).length, 1)
  })

  test('a create whose answer was lost after its commit is sent again and answered 200, not 40009; a rival with other contents gets 40009', async () => {
    const s0 = await startTestServer({ after })
    const proxy = await startTcpProxy(s0.db.url)
    after(() => proxy.close())
    const s = await startTestServer({ after }, { db: s0.db, connectTo: () => proxy.url })
    // The token's first use is written before the answer is lost, on a connection of its own.
    assert.equal((await s.post({ id: uniqueId(), name: 'before' })).status, 200)
    await within(5000, async () => {
      const [newest] = await s0.db.sql`select last_used_at from api_tokens order by id desc limit 1`
      return newest?.last_used_at != null
    })

    const id = uniqueId()
    // The create's insert, not what the service may send of its own meanwhile (a token reload
    // on a late notification): a CI run saw the create answered as if nothing was lost.
    const lost = proxy.loseNextAnswer((sql) => /\binsert into plants\b/.test(sql))
    const answer = s.post({ id, name: 'committed', tag: 'once' })
    await Promise.race([
      lost,
      new Promise((_, reject) => setTimeout(() => reject(new Error('no answer was lost')), 5000)),
    ])
    const rival = await s.post({ id, name: 'rival' })
    const res = await answer
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), { name: 'committed', tag: 'once' })
    assert.equal(rival.status, 400)
    assert.equal(((await rival.json()) as { error: number }).error, 40009)
    const rows = await s.db.sql`select name, tag from plants where id = ${id}`
    assert.deepEqual([...rows], [{ name: 'committed', tag: 'once' }])
    assert.ok(
      gapLines(s).began.some((l) => l.reason === 'connection_lost'),
      'the lost answer was not held',
    )
  })
})
