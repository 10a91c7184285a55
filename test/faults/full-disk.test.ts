import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { closeSync, existsSync, openSync, readFileSync, statSync } from 'node:fs'
import { readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import postgres from 'postgres'
import { startEmbedded } from '../../src/db/start/embedded.ts'
import { migrate } from '../../src/db/start/migrate.ts'
import { postgres15Bin, startPostgres15 } from '../helpers/citus.ts'
import { projectDir } from '../helpers/cli.ts'
import { seedEmbedded } from '../helpers/cluster-cache.ts'
import { type Cleanup, quietLog } from '../helpers/database.ts'
import { type Drive, driveCreates, lostAcknowledgements, pastTheFault } from '../helpers/drive.ts'
import { serverPort } from '../helpers/ports.ts'
import { isRunning, serviceEnv } from '../helpers/process.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { type SmallDisk, smallDisk, smallDiskUnavailable } from '../helpers/small-disk.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { sleep, within } from '../helpers/wait.ts'

// The kernel's own full disk: PostgreSQL's data directory (pg_wal with it) on a tmpfs of its
// own, filled by a file beside it. Outside CI a machine that cannot mount one (not root) skips
// with the reason; in CI that is a failure.
const unavailable = smallDiskUnavailable()
const skip = unavailable !== undefined && !process.env.CI ? unavailable : false

type OnSmallDisk = {
  disk: SmallDisk & Cleanup
  server: TestServer
  check: postgres.Sql
  /** Starts the database again (on its port), as an operator would once it stayed down. */
  restart: () => Promise<void>
}

/** An embedded PostgreSQL whose data directory is on a small filesystem, and the service on it. */
async function onSmallDisk(t: { after: (fn: () => unknown) => void }): Promise<OnSmallDisk> {
  const disk = await smallDisk(t, 160)
  // Below the ephemeral range (ports.ts): the server initialises for seconds before it binds, and
  // is started again on the same port; in between, another file's connection may take a port
  // from that range.
  const port = await serverPort()
  const start = () =>
    startEmbedded({
      dir: join(disk.dir, 'db'),
      log: quietLog,
      shareRunning: false,
      fast: true,
      port,
    })
  await seedEmbedded(join(disk.dir, 'db'))
  let db = await start()
  disk.after(() => db.stop())
  await migrate(db.url, quietLog)
  const check = postgres(db.url, { max: 2, onnotice: () => {} })
  disk.after(() => check.end({ timeout: 1 }))
  const server = await startTestServer(disk, { db: { url: db.url, sql: check } })
  const restart = async () => {
    await db.stop().catch(() => {})
    db = await start()
  }
  return { disk, server, check, restart }
}

const readyz = async (base: string) => {
  const res = await fetch(`${base}/readyz`)
  return { status: res.status, body: (await res.json()) as { message?: string } }
}

/** Every create answered 200, or 503 with `Retry-After: 1` (never 500); every 200 stored. */
async function onlyAnswersAndNothingLost(drive: Drive, check: postgres.Sql): Promise<void> {
  assert.deepEqual(
    [...drive.statuses.keys()].filter((s) => s !== 200 && s !== 503),
    [],
    'only 200 and 503',
  )
  for (const a of drive.answers.filter((x) => x.status === 503))
    assert.equal(a.retryAfter, '1', 'every 503 carries Retry-After')
  assert.deepEqual(await lostAcknowledgements(check, drive.acknowledged), [])
}

const metricsOf = async (base: string) => (await fetch(`${base}/metrics`)).text()

const linesAt = (logs: Record<string, unknown>[], from: number, levels: string[]) =>
  logs.slice(from).filter((l) => levels.includes(String(l.level)))

describe("the database's disk full", { concurrency: 1 }, () => {
  test("relation files that cannot grow: creates 503 with Retry-After (never 500), /readyz 503 within 5 s saying the disk is full, one warning with PostgreSQL's message, 200 and ready again within 5 s of the space back, nothing acknowledged lost", {
    skip,
    timeout: 120_000,
  }, async (t) => {
    assert.equal(unavailable, undefined, unavailable)
    const { disk, server, check } = await onSmallDisk(t)
    const drive = driveCreates(server.base, server.token, { concurrency: 8, pauseMs: 1 })
    t.after(() => drive.stop())
    await within(10_000, async () => drive.acknowledged.length > 500)
    const logFrom = server.logs.length
    await disk.fill()
    const filledAt = performance.now()
    await within(20_000, async () => drive.unavailable.length > 0)
    const firstRefused = drive.unavailableAt[0] ?? 0
    // Readiness: 503 within 5 s of the first create refused, with the reason in words.
    await within(5_000, async () => (await readyz(server.base)).status === 503)
    const notReady = await readyz(server.base)
    assert.match(String(notReady.body.message), /disk is full/)
    // A 20-s episode.
    await sleep(filledAt + 20_000 - performance.now())
    assert.equal((await readyz(server.base)).status, 503, 'still not ready while the disk is full')
    assert.match(await metricsOf(server.base), /^plant_store_database_disk_full 1$/m)
    const refusedBefore = drive.unavailable.length
    assert.ok(refusedBefore > 100, `creates refused while full: ${refusedBefore}`)
    await disk.free()
    const freedAt = performance.now()
    await within(5_000, async () => (drive.acknowledgedAt.at(-1) ?? 0) > freedAt)
    await within(5_000, async () => (await readyz(server.base)).status === 200)
    await pastTheFault(drive, performance.now())
    await drive.stop()
    assert.match(await metricsOf(server.base), /^plant_store_database_disk_full 0$/m)

    await onlyAnswersAndNothingLost(drive, check)

    const warnings = linesAt(server.logs, logFrom, ['warn', 'error'])
    const full = warnings.filter((l) => String(l.message).startsWith("the database's disk is full"))
    assert.equal(full.length, 1, JSON.stringify(warnings.slice(0, 5)))
    assert.match(String(full[0]?.postgres), /No space left on device|could not extend file/)
    assert.match(String(full[0]?.database), /127\.0\.0\.1:\d+\/postgres/)
    const back = warnings.filter((l) =>
      String(l.message).startsWith("the database's disk has room again"),
    )
    assert.equal(back.length, 1)
    assert.ok(Number(back[0]?.unavailable) > 0)
    // No line per refused create at warn: the episode's lines and readiness' changes.
    assert.ok(
      warnings.length <= 12,
      `${warnings.length} warnings: ${warnings.map((w) => w.message).join(' | ')}`,
    )
    t.diagnostic(
      `first 503 ${Math.round(firstRefused - filledAt)} ms after the disk filled; ${drive.unavailable.length} creates 503, ${drive.acknowledged.length} 200; ${warnings.length} warnings`,
    )
  })
})

describe("the database's WAL cannot grow", { concurrency: 1 }, () => {
  test('a segment switch on a full disk: PostgreSQL panics; creates 200 or 503 with Retry-After (never 500), /readyz 503 until creates are stored again, nothing acknowledged lost', {
    skip,
    timeout: 180_000,
  }, async (t) => {
    assert.equal(unavailable, undefined, unavailable)
    const { disk, server, check, restart } = await onSmallDisk(t)
    const drive = driveCreates(server.base, server.token, { concurrency: 8, pauseMs: 1 })
    t.after(() => drive.stop())
    await within(10_000, async () => drive.acknowledged.length > 500)
    await disk.fill()
    // The next WAL record needs a new segment, which the full disk cannot hold.
    await check`select pg_switch_wal()`.catch(() => {})
    await within(20_000, async () => drive.unavailable.length > 0)
    await within(5_000, async () => (await readyz(server.base)).status === 503)
    const whileFull: number[] = []
    for (let i = 0; i < 8; i++) {
      whileFull.push((await readyz(server.base)).status)
      await sleep(1_000)
    }
    assert.deepEqual(
      whileFull.filter((s) => s !== 503),
      [],
      '/readyz 503 while full',
    )
    await disk.free()
    const freedAt = performance.now()
    // PostgreSQL may not finish its recovery on a full disk; then it stays down until started.
    const back = await within(5_000, async () => (drive.acknowledgedAt.at(-1) ?? 0) > freedAt)
      .then(() => true)
      .catch(() => false)
    if (!back) await restart()
    await within(15_000, async () => (drive.acknowledgedAt.at(-1) ?? 0) > freedAt)
    await within(10_000, async () => (await readyz(server.base)).status === 200)
    await drive.stop()

    await onlyAnswersAndNothingLost(drive, check)
  })
})

describe('a start on a full disk', { concurrency: 1 }, () => {
  test('a fresh instance on a database whose disk is full starts, says so in one warning, and /readyz says 503 (the disk is full) until there is room, then 200 within 5 s', {
    skip,
    timeout: 120_000,
  }, async (t) => {
    assert.equal(unavailable, undefined, unavailable)
    const { disk, server, check } = await onSmallDisk(t)
    await server.close()
    await disk.fill()
    const fresh = await startTestServer(disk, { db: { url: server.db.url, sql: check } })
    const full = fresh.logs.filter((l) =>
      String(l.message).startsWith("the database's disk is full"),
    )
    assert.equal(full.length, 1, 'one line at start')
    assert.equal(full[0]?.level, 'warn')
    const notReady = await readyz(fresh.base)
    assert.equal(notReady.status, 503)
    assert.match(String(notReady.body.message), /disk is full/)
    const res = await fresh.post({ id: 9_000_000_001, name: 'on a full disk' })
    assert.equal(res.status, 503)
    assert.equal(res.headers.get('retry-after'), '1')
    await disk.free()
    await within(8_000, async () => (await readyz(fresh.base)).status === 200)
    const stored = await fresh.post({ id: 9_000_000_001, name: 'on a full disk' })
    assert.equal(stored.status, 200)
  })
})

/**
 * The service on Debian's PostgreSQL 15, its data on a small filesystem: before 18, a new
 * connection that cannot write its init file fails with XX000, no code of its own.
 */
async function onSmallDisk15(t: Cleanup): Promise<OnSmallDisk & { dataDir: string }> {
  const disk = await smallDisk(t, 160)
  const node = await startPostgres15(disk, { fsync: false, parent: disk.dir })
  await migrate(node.url, quietLog)
  const check = postgres(node.url, { max: 2, onnotice: () => {} })
  disk.after(() => check.end({ timeout: 1 }))
  const server = await startTestServer(disk, { db: { url: node.url, sql: check } })
  const [made] = await readdir(disk.dir).then((names) =>
    names.filter((n) => n.startsWith('plant-store-citus-')),
  )
  return {
    disk,
    server,
    check,
    restart: node.start,
    dataDir: join(disk.dir, String(made), 'plain'),
  }
}

describe('new connections that cannot write their init file', { concurrency: 1 }, () => {
  const servers = {
    'PostgreSQL 18 (embedded)': async (t: Cleanup) => {
      const on = await onSmallDisk(t)
      return { ...on, dataDir: join(on.disk.dir, 'db', 'postgres') }
    },
    "PostgreSQL 15 (Debian's)": onSmallDisk15,
  }
  for (const [name, arrange] of Object.entries(servers))
    test(`${name}: "could not write init file" on every new connection (a full disk after a restart): creates 503 with Retry-After, never 500, and /readyz 503 saying the disk is full`, {
      skip:
        skip ||
        (name.includes('15') && !existsSync(join(postgres15Bin, 'postgres')) && !process.env.CI
          ? `no ${postgres15Bin}/postgres`
          : false),
      timeout: 120_000,
    }, async (t) => {
      assert.equal(unavailable, undefined, unavailable)
      const { disk, server, check, dataDir } = await arrange(t)
      // PostgreSQL writes its relation-cache init files again when they are gone (as after a
      // crash recovery): on a full disk, each new connection then fails before it is open.
      await rm(join(dataDir, 'global', 'pg_internal.init'), { force: true })
      for (const db of await readdir(join(dataDir, 'base')))
        await rm(join(dataDir, 'base', db, 'pg_internal.init'), { force: true })
      await disk.fill()
      await check`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name like 'plant-store%' and pid <> pg_backend_pid()`
      // What every new connection meets now.
      const fresh = postgres(server.db.url, { max: 1, onnotice: () => {} })
      const met = await fresh`select 1`.then(
        () => 'connected',
        (err: { code?: string; message?: string }) => `${err.code} ${err.message}`,
      )
      await fresh.end({ timeout: 1 })
      // XX000 up to PostgreSQL 17 (an elog without a code), 53100 with the system's words in 18.
      assert.match(
        met,
        name.includes('15')
          ? /^XX000 could not write init file$/
          : /^53100 could not write init file/,
      )
      const statuses = new Map<number, number>()
      for (let i = 0; i < 40; i++) {
        const res = await server.post({ id: 9_100_000_000 + i, name: `init file ${i}` })
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
        if (res.status === 503) assert.equal(res.headers.get('retry-after'), '1')
      }
      assert.deepEqual([...statuses.keys()], [503], JSON.stringify([...statuses]))
      const notReady = await readyz(server.base)
      assert.equal(notReady.status, 503)
      assert.match(String(notReady.body.message), /disk is full/)
      const said = server.logs.filter((l) =>
        String(l.message).startsWith("the database's disk is full"),
      )
      assert.equal(said.length, 1)
      assert.match(String(said[0]?.postgres), /could not write init file|No space left on device/)
      // A start against it refuses, saying why in words.
      await assert.rejects(
        startTestServer(disk, { db: server.db }),
        /^Error: cannot use the database at 127\.0\.0\.1:\d+\/\w+ as postgres: its disk is full \(PostgreSQL says "could not write init file/,
      )
      await disk.free()
      await within(
        10_000,
        async () => (await server.post({ id: 9_100_000_999, name: 'room again' })).status === 200,
      )
    })
})

/**
 * `npm start`'s serve() as its own process, the embedded database in `dataDir`, its log
 * (standard output) to `stdout`: a file descriptor, or a pipe read into `out`.
 */
function serveChild(dataDir: string, stdout: number | 'pipe') {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(projectDir, 'test', 'helpers', 'serve-child.ts'), dataDir],
    {
      cwd: projectDir,
      env: serviceEnv({ LOG_LEVEL: 'info' }),
      stdio: ['ignore', stdout, 'pipe'],
    },
  )
  const seen = { out: '', err: '' }
  child.stdout?.on('data', (c: Buffer) => {
    seen.out += c.toString()
  })
  child.stderr?.on('data', (c: Buffer) => {
    seen.err += c.toString()
  })
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve))
  return { child, exited, out: () => seen.out, stderr: () => seen.err }
}

describe("the service's own disk", { concurrency: 1 }, () => {
  test('a full log destination: the service keeps serving, drops the lines it cannot write and counts them, says so on standard error when it begins and ends, writes whole lines again once there is room, and stops its embedded PostgreSQL when it stops', {
    skip,
    timeout: 120_000,
  }, async (t) => {
    assert.equal(unavailable, undefined, unavailable)
    const disk = await smallDisk(t, 1)
    const { dir: dataDir, ...data } = await tempDir(t, 'plant-store-log-disk-')
    const logPath = join(disk.dir, 'service.log')
    const logFile = openSync(logPath, 'w')
    const service = serveChild(dataDir, logFile)
    closeSync(logFile)
    data.after(async () => {
      service.child.kill('SIGKILL')
      await service.exited
    })
    const listening = await within(60_000, async () =>
      readFileSync(logPath, 'utf8').includes('"message":"listening"'),
    ).then(() => /"message":"listening".*"url":"([^"]+)"/.exec(readFileSync(logPath, 'utf8'))?.[1])
    assert.ok(listening)
    const token = readFileSync(join(dataDir, 'dev-token'), 'utf8').trim()
    const postmaster = Number(
      readFileSync(join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').split('\n')[0],
    )

    await disk.fill()
    // The log file's last page has room the filler cannot take: a few lines still fit in it.
    // Requests until the first line is dropped, so that every create after it is one that cannot
    // be written.
    await within(10_000, async () => {
      await fetch(`${listening}/healthz`)
      return /the log cannot be written to its destination \(ENOSPC\)/.test(service.stderr())
    })
    const droppedBefore = await droppedLines(listening)
    const drive = driveCreates(listening, token, { concurrency: 8, pauseMs: 0 })
    await within(20_000, async () => drive.acknowledged.length >= 500)
    await drive.stop()
    assert.deepEqual([...drive.statuses.keys()], [200], 'every create answered 200')
    assert.equal(service.child.exitCode, null, 'the service still runs')
    const dropped = (await droppedLines(listening)) - droppedBefore
    assert.ok(
      dropped >= drive.acknowledged.length,
      `the line of every create counted as dropped: ${dropped} for ${drive.acknowledged.length} creates`,
    )

    await disk.free()
    const sizeBefore = statSync(logPath).size
    // Room again: one more line makes the log writable again (the notice says how many were lost).
    await fetch(`${listening}/healthz`)
    await within(5_000, async () =>
      /the log is written again, after \d+ s in which \d+ lines were dropped/.test(
        service.stderr(),
      ),
    )
    const after = readFileSync(logPath, 'utf8')
      .slice(sizeBefore)
      .split('\n')
      .filter((l) => l !== '')
    assert.ok(after.length > 0, 'lines written again')
    // Whole lines: a line cut by the full disk ends at once, and each new one parses.
    for (const line of after.slice(line0(after))) JSON.parse(line)

    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
    assert.equal(isRunning(postmaster), false, 'the embedded PostgreSQL stopped with it')
  })
})

/** What the service's metrics count as log lines dropped so far. */
const droppedLines = async (url: string) =>
  Number(/^plant_store_log_lines_dropped_total (\d+)$/m.exec(await metricsOf(url))?.[1])

/** Where whole lines begin: after a fragment the full disk cut, if the first line is one. */
const line0 = (lines: string[]) => {
  try {
    JSON.parse(lines[0] ?? '')
    return 0
  } catch {
    return 1
  }
}

/** `npm start` once, stopped (SIGTERM) once it listens: its exit code and log. */
async function startOnce(dataDir: string) {
  const service = serveChild(dataDir, 'pipe')
  service.child.stdout?.on('data', () => {
    if (service.out().includes('"message":"listening"')) service.child.kill('SIGTERM')
  })
  return { code: await service.exited, out: service.out() }
}

describe("npm start with the embedded database's disk full", { concurrency: 1 }, () => {
  test('a first start and a later one on a full disk refuse with a line that says the disk is full, keep nothing half-written, and start once there is room', {
    skip,
    timeout: 180_000,
  }, async (t) => {
    assert.equal(unavailable, undefined, unavailable)
    const disk = await smallDisk(t, 160)
    const dataDir = join(disk.dir, 'data')
    // The first start (no database yet), then a later one (the database made by the first).
    for (const what of [
      'the embedded database could not be initialised, and nothing of it was kept',
      'the embedded PostgreSQL could not start',
    ]) {
      await disk.fill()
      const refused = await startOnce(dataDir)
      assert.equal(refused.code, 1)
      const said = String(
        refused.out
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as { message: string; error?: string })
          .find((l) => l.message === 'the service did not start')?.error ?? refused.out,
      )
      assert.ok(said.startsWith(`the disk of ${disk.dir}/data is full: ${what} (`), said)
      assert.match(said, /[Nn]o space left on device[^)]*\); free space there and start again$/)
      await disk.free()
      const started = await startOnce(dataDir)
      assert.equal(started.code, 0, started.out)
    }
  })
})
