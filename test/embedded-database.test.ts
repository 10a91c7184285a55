import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { appendFile, readFile, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { parseConfig } from '../src/config.ts'
import { freePort, startEmbedded } from '../src/db/start/embedded.ts'
import { sharedBuffersMb } from '../src/db/start/server-settings.ts'
import { createLog } from '../src/log.ts'
import { startService } from '../src/service.ts'
import { projectDir } from './helpers/cli.ts'
import { isRunning } from './helpers/process.ts'
import { tempDir } from './helpers/temp-dir.ts'
import { sleep, within } from './helpers/wait.ts'

function capture() {
  const lines: Record<string, unknown>[] = []
  return {
    lines,
    log: createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)),
  }
}

describe('the embedded database (no DATABASE_URL)', () => {
  test('the first start creates the dev token (file mode 0600, printed once) and warns about nothing, the dev token included; data and token survive a restart', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    // The tests' own warm-up (test/helpers/process.ts): the default's is test/warm-up.test.ts's.
    const config = parseConfig({ PORT: '0', WARM_UP_CREATES: '100' })
    const first = capture()
    const service = await startService(config, first.log, { dataDir: dir })
    tmp.after(() => service.close())
    const token = (await readFile(join(dir, 'dev-token'), 'utf8')).trim()
    assert.match(token, /^pst_/)
    assert.equal(statSync(join(dir, 'dev-token')).mode & 0o777, 0o600)
    assert.ok(
      first.lines.some((l) => l.devToken === token),
      'the start-up log prints the dev token',
    )
    const warnings = (lines: Record<string, unknown>[]) =>
      lines.filter((l) => l.level === 'warn').map((l) => l.message)
    assert.deepEqual(
      warnings(first.lines),
      [],
      'a newcomer is not warned about what they were handed',
    )
    const created = await fetch(`${service.url}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"id":9007199254740993,"name":"kept"}',
    })
    assert.equal(created.status, 200)
    await service.close()
    assert.ok(
      !existsSync(join(dir, 'postgres', 'postmaster.pid')),
      'the embedded server was stopped',
    )

    const second = capture()
    const again = await startService(config, second.log, { dataDir: dir })
    tmp.after(() => again.close())
    assert.ok(!second.lines.some((l) => 'devToken' in l), 'no second dev token')
    assert.deepEqual(warnings(second.lines), [])
    const retry = await fetch(`${again.url}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"id":9007199254740993,"name":"kept"}',
    })
    assert.equal(retry.status, 200, 'the plant and the token were kept across the restart')
  })

  /** A process that started the embedded database in `dir`, and its server's pid. */
  async function embeddedChild(dir: string) {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/embedded-child.ts', dir],
      {
        cwd: projectDir,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    )
    const url = await new Promise<string>((resolve) =>
      child.stdout.once('data', (c: Buffer) => resolve(c.toString().trim())),
    )
    const sql = postgres(url, { max: 1, onnotice: () => {} })
    await sql`create table kept (v text)`
    await sql`insert into kept values ('before the kill')`
    await sql.end()
    const server = Number(
      (await readFile(join(dir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0],
    )
    return { child, server }
  }

  async function keptAfterRestart(dir: string, tmp: { after: (fn: () => unknown) => void }) {
    const { lines, log } = capture()
    const db = await startEmbedded({ dir, log, shareRunning: false, fast: true })
    tmp.after(() => db.stop())
    const again = postgres(db.url, { max: 1, onnotice: () => {} })
    const rows = await again`select v from kept`
    await again.end()
    assert.deepEqual(
      rows.map((r) => r.v),
      ['before the kill'],
    )
    return lines
  }

  test('the server of a SIGKILLed process stops within seconds (its watch), with its data kept', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    const { child, server } = await embeddedChild(dir)
    child.kill('SIGKILL')
    await new Promise((r) => child.on('exit', r))
    await within(10_000, async () => !isRunning(server))
    await keptAfterRestart(dir, tmp)
  })

  test('a server orphaned with its watch (both killed) is stopped on the next start, with its data kept', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    const { child, server } = await embeddedChild(dir)
    const watches = watchesOf(dir)
    assert.equal(watches.length, 1, 'one watch for the server')
    for (const pid of watches) process.kill(pid, 'SIGKILL')
    child.kill('SIGKILL')
    await new Promise((r) => child.on('exit', r))
    await sleep(1_500)
    assert.ok(isRunning(server), 'orphaned')
    const lines = await keptAfterRestart(dir, tmp)
    assert.ok(
      lines.some(
        (l) => String(l.message).includes('left running by a killed process') && l.pid === server,
      ),
    )
  })

  test('a second service on a cluster in use by a live process is refused with a clear message', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    const db = await startEmbedded({ dir, log: capture().log, shareRunning: false, fast: true })
    tmp.after(() => db.stop())
    // The owner file names this live process; another process starting the cluster is refused.
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/embedded-child.ts', dir],
      {
        cwd: projectDir,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    )
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString()
    })
    const code = await new Promise((r) => child.on('exit', r))
    assert.notEqual(code, 0)
    assert.match(stderr, /in use by process \d+/)
  })

  test('a data folder, new or made before them, runs with the settings for a growing table: wal_compression lz4 or zstd if the binaries accept one, else off (never pglz), shared_buffers from memory, max_wal_size 8GB, checkpoints every 15 min', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-growth-')
    const quiet = createLog('error', () => {})
    const read = async (url: string) => {
      const sql = postgres(url, { max: 1, onnotice: () => {} })
      try {
        const rows = await sql<
          { name: string; setting: string; enumvals: string | null; unit: string | null }[]
        >`
          select name, setting, enumvals::text, unit from pg_settings
          where name in ('wal_compression', 'shared_buffers', 'max_wal_size', 'checkpoint_timeout')`
        return Object.fromEntries(rows.map((r) => [r.name, r]))
      } finally {
        await sql.end()
      }
    }
    const check = async (url: string) => {
      const got = await read(url)
      const accepted = (got.wal_compression?.enumvals ?? '').replace(/[{}]/g, '').split(',')
      assert.ok(accepted.includes('pglz'), `accepted: ${accepted}`)
      // lz4, else zstd, else off: never pglz, which costs more than it saves here.
      const best = ['lz4', 'zstd'].find((m) => accepted.includes(m)) ?? 'off'
      assert.equal(got.wal_compression?.setting, best)
      assert.equal(Number(got.shared_buffers?.setting) * 8192, sharedBuffersMb() * 2 ** 20)
      assert.deepEqual([got.max_wal_size?.setting, got.max_wal_size?.unit], ['8192', 'MB'])
      assert.deepEqual(
        [got.checkpoint_timeout?.setting, got.checkpoint_timeout?.unit],
        ['900', 's'],
      )
    }
    let db = await startEmbedded({ dir, log: quiet, shareRunning: false, fast: true })
    tmp.after(() => db.stop())
    await check(db.url)
    await db.stop()
    // As a folder made before these settings would be: pglz in its own files (as an earlier
    // version of the service chose), and a small max_wal_size.
    const conf = join(dir, 'postgres', 'postgresql.auto.conf')
    const text = await readFile(conf, 'utf8')
    await writeFile(
      conf,
      `${text.replace(/^wal_compression = .*\n/m, '')}wal_compression = 'pglz'\n`,
    )
    await appendFile(join(dir, 'postgres', 'postgresql.conf'), "max_wal_size = '1GB'\n")
    db = await startEmbedded({ dir, log: quiet, shareRunning: false, fast: true })
    await check(db.url)
  })

  test('a server that starts but cannot then be set up (ALTER SYSTEM refused) is stopped again, and the start fails saying so', async () => {
    const { dir } = await tempDir({ after }, 'plant-store-setup-')
    const quiet = createLog('error', () => {})
    const port = await freePort()
    await assert.rejects(
      startEmbedded({
        dir,
        log: quiet,
        shareRunning: false,
        fast: true,
        port,
        // PostgreSQL 17 and later refuse ALTER SYSTEM with this; wal_compression pglz, which the
        // start never keeps, makes it set another with ALTER SYSTEM.
        settings: { allow_alter_system: 'off', wal_compression: 'pglz' },
      }),
      /could not be set up, and was stopped again/,
    )
    // Nothing left running: no postmaster.pid, and the port refuses connections.
    await within(10_000, () => !existsSync(join(dir, 'postgres', 'postmaster.pid')))
    const probe = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, {
      max: 1,
      connect_timeout: 2,
      onnotice: () => {},
    })
    await assert.rejects(probe`select 1`, /ECONNREFUSED/)
    await probe.end({ timeout: 0 })
  })

  test("a start on a port another server holds fails with PostgreSQL's own reason in the message", async () => {
    const { dir } = await tempDir({ after }, 'plant-store-port-taken-')
    const holder = createServer()
    holder.listen(0, '127.0.0.1')
    await once(holder, 'listening')
    after(() => holder.close())
    const port = (holder.address() as { port: number }).port
    await assert.rejects(
      startEmbedded({
        dir,
        log: createLog('error', () => {}),
        shareRunning: false,
        fast: true,
        port,
      }),
      /did not start: .*(could not bind|could not create any TCP\/IP sockets)/,
    )
  })

  test('sharedBuffersMb: a quarter of the memory, from 128 MB up to 2 GB', () => {
    assert.equal(sharedBuffersMb(256 * 2 ** 20), 128)
    assert.equal(sharedBuffersMb(4 * 2 ** 30), 1024)
    assert.equal(sharedBuffersMb(64 * 2 ** 30), 2048)
  })
})

/** The watches (embedded.ts, stopWhenGone) of the server in `dir`, by their command lines. */
function watchesOf(dir: string): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const args = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0')
        return args.includes('plant-store-embedded-watch') && args.includes(join(dir, 'postgres'))
      } catch {
        return false
      }
    })
    .map(Number)
}
