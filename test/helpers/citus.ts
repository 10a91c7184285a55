import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { appendFile, chown } from 'node:fs/promises'
import { join } from 'node:path'
import postgres, { type Sql } from 'postgres'
import { runNpm } from './cli.ts'
import { initdbCopy, postgresUser } from './cluster-cache.ts'
import type { Cleanup } from './database.ts'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

// A real Citus cluster for the tests: Debian's PostgreSQL 15 with Citus 13.2.2, built by
// .ci/citus.sh from ../shared/vendor/, a coordinator and two workers on 127.0.0.1.

/** Debian's PostgreSQL 15 programs (`CITUS_PG_BIN` elsewhere). */
export const postgres15Bin = process.env.CITUS_PG_BIN || '/usr/lib/postgresql/15/bin'
const bin = postgres15Bin
const citusLibrary = join(bin, '..', 'lib', 'citus.so')

/** Why the Citus tests cannot run here, or undefined when they can. */
export function citusUnavailable(): string | undefined {
  if (!existsSync(join(bin, 'postgres')) || !existsSync(citusLibrary))
    return `no Citus for PostgreSQL 15 here (${citusLibrary}); run .ci/citus.sh as root (Debian) to build it and enable these tests`
  return undefined
}

/** One node of the cluster: its port, and a way to stop and start it again. */
export type CitusNode = {
  readonly port: number
  readonly url: string
  /** PostgreSQL's immediate shutdown (SIGQUIT), as `pg_ctl stop -m immediate`. */
  stop(): Promise<void>
  /** PostgreSQL's fast shutdown (SIGINT), as `pg_ctl stop -m fast`: sessions ended (57P01). */
  stopFast(): Promise<void>
  /** The postmaster's process id while it runs (its CPU, with its backends', for the bench). */
  pid(): number | undefined
  start(): Promise<void>
}

export type CitusCluster = {
  readonly coordinator: CitusNode
  readonly workers: readonly CitusNode[]
  /** A pool on the coordinator's `plants` database. */
  readonly sql: Sql
}

/**
 * Starts PostgreSQL 15 servers in a new temporary folder, each with a `plants` database: `node`
 * starts one, with Citus loaded or not. `fsync` off (the tests) or on (the bench).
 */
async function postgres15(
  t: Cleanup,
  { fsync = false, parent }: { fsync?: boolean; parent?: string } = {},
) {
  const { dir } = await tempDir(t, 'plant-store-citus-', parent)
  const user = await postgresUser()
  const asPostgres = user ?? {}
  if (user) await chown(dir, user.uid, user.gid)
  const node = async (name: string, citus = true): Promise<CitusNode> => {
    const data = join(dir, name)
    const port = await serverPort()
    await initdbCopy(
      'initdb-citus-15',
      join(bin, 'initdb'),
      ['-U', 'postgres', '--auth=trust', '-E', 'UTF8'],
      data,
      user,
    )
    await appendFile(
      join(data, 'postgresql.conf'),
      `listen_addresses = '127.0.0.1'\nport = ${port}\nmax_connections = 300\nunix_socket_directories = ''\nfsync = ${fsync ? 'on' : 'off'}\n${
        citus
          ? "shared_preload_libraries = 'citus'\ncitus.node_conninfo = 'sslmode=disable'\ncitus.enable_stat_counters = on\n"
          : ''
      }`,
    )
    let child: ChildProcess | undefined
    let exited: Promise<unknown> = Promise.resolve()
    const url = `postgres://postgres@127.0.0.1:${port}/plants`
    const start = async () => {
      const c = spawn(join(bin, 'postgres'), ['-D', data], {
        stdio: ['ignore', 'ignore', 'ignore'],
        // libpq, which Citus uses between nodes, reads its files under HOME.
        env: { ...process.env, HOME: data },
        ...asPostgres,
      })
      child = c
      exited = new Promise((r) => c.on('exit', r))
      const probe = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, {
        max: 1,
        connect_timeout: 1,
        onnotice: () => {},
      })
      await within(30_000, () =>
        probe`select 1`.then(
          () => true,
          () => false,
        ),
      )
      await probe.end()
    }
    const stop = async () => {
      child?.kill('SIGQUIT')
      await exited
    }
    const stopFast = async () => {
      child?.kill('SIGINT')
      await exited
    }
    t.after(async () => {
      child?.kill('SIGINT')
      await exited
    })
    await start()
    const admin = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, {
      max: 1,
      onnotice: () => {},
    })
    await admin`create database plants`
    await admin.end()
    if (citus) {
      const db = postgres(url, { max: 1, onnotice: () => {} })
      await db`create extension citus`
      await db.end()
    }
    return { port, url, stop, stopFast, start, pid: () => child?.pid }
  }
  return node
}

/** A plain PostgreSQL 15 (Debian's), beside the cluster: the same server without Citus. */
export async function startPostgres15(
  t: Cleanup,
  options: { fsync?: boolean; parent?: string } = { fsync: false },
): Promise<CitusNode> {
  return (await postgres15(t, options))('plain', false)
}

/** Starts a coordinator and two workers, each with `citus` in the `plants` database. */
export async function startCitusCluster(
  t: Cleanup,
  options = { fsync: false },
): Promise<CitusCluster> {
  const node = await postgres15(t, options)
  const coordinator = await node('coordinator')
  const workers = [await node('worker1'), await node('worker2')]
  const sql = postgres(coordinator.url, { max: 4, onnotice: () => {} })
  t.after(() => sql.end({ timeout: 5 }))
  await sql`select citus_set_coordinator_host('127.0.0.1', ${coordinator.port})`
  for (const w of workers) await sql`select citus_add_node('127.0.0.1', ${w.port})`
  return { coordinator, workers, sql }
}

/**
 * Whether a Citus test file runs here: the reason it cannot (a line on stderr names `file`), as
 * `skip` outside CI; in CI it never skips, and a missing Citus fails its tests.
 */
export function citusSkip(file: string): { missing: string | undefined; skip: string | false } {
  const missing = citusUnavailable()
  const skip = missing !== undefined && process.env.CI === undefined ? missing : false
  if (skip) process.stderr.write(`${file}: skipped: ${missing}\n`)
  return { missing, skip }
}

/**
 * Inside a `describe`: one Citus cluster for its tests, started and migrated (npm run migrate)
 * before the first, its cleanups run after the last, last first. Returns its getter.
 */
export function citusClusterForSuite(
  hooks: { before: (fn: () => Promise<void>) => void; after: (fn: () => Promise<void>) => void },
  missing: string | undefined,
  migrate: (url: string) => Promise<void>,
): () => CitusCluster {
  let cluster: CitusCluster | undefined
  const cleanups: (() => unknown)[] = []
  hooks.after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup()
  })
  hooks.before(async () => {
    if (missing) throw new Error(missing)
    cluster = await startCitusCluster({ after: (fn) => void cleanups.push(fn) })
    await migrate(cluster.coordinator.url)
  })
  return () => {
    if (cluster === undefined) throw new Error('the Citus cluster has not started')
    return cluster
  }
}

/** A POST /plants with `token`, its body as given (a string) or as JSON. */
export const postPlant = (base: string, token: string, body: unknown) =>
  fetch(`${base}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })

/** `npm run migrate` on the coordinator at `url`, as an operator runs it; throws when it fails. */
export async function migrateWithNpm(url: string): Promise<void> {
  const migrated = await runNpm('migrate', [], { DATABASE_URL: url })
  if (migrated.code !== 0) throw new Error(`npm run migrate failed: ${migrated.stderr}`)
}
