import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { appendFile, chown } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import postgres, { type Sql } from 'postgres'
import { ensurePostgresUser, freePort } from '../../src/db/embedded.ts'
import type { Cleanup } from './database.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

// A real Citus cluster for the tests: Debian's PostgreSQL 15 with Citus 13.2.2, built by
// .ci/citus.sh from ../shared/vendor/, a coordinator and two workers on 127.0.0.1.

const run = promisify(execFile)
const bin = process.env.CITUS_PG_BIN || '/usr/lib/postgresql/15/bin'
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
  start(): Promise<void>
}

export type CitusCluster = {
  readonly coordinator: CitusNode
  readonly workers: readonly CitusNode[]
  /** A pool on the coordinator's `plants` database. */
  readonly sql: Sql
}

async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined
  await ensurePostgresUser()
  const id = async (flag: string) => Number((await run('id', [flag, 'postgres'])).stdout.trim())
  return { uid: await id('-u'), gid: await id('-g') }
}

/** Starts a coordinator and two workers, each with `citus` in the `plants` database. */
export async function startCitusCluster(t: Cleanup): Promise<CitusCluster> {
  const { dir } = await tempDir(t, 'plant-store-citus-')
  const user = await postgresUser()
  const asPostgres = user ?? {}
  const node = async (name: string): Promise<CitusNode> => {
    const data = join(dir, name)
    const port = await freePort()
    await run(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8'], {
      ...asPostgres,
    })
    await appendFile(
      join(data, 'postgresql.conf'),
      `shared_preload_libraries = 'citus'\nlisten_addresses = '127.0.0.1'\nport = ${port}\nmax_connections = 300\nfsync = off\nunix_socket_directories = ''\ncitus.node_conninfo = 'sslmode=disable'\n`,
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
    t.after(async () => {
      child?.kill('SIGINT')
      await exited
    })
    await start()
    return { port, url, stop, start }
  }
  if (user) await chown(dir, user.uid, user.gid)
  const coordinator = await node('coordinator')
  const workers = [await node('worker1'), await node('worker2')]
  for (const n of [coordinator, ...workers]) {
    const admin = postgres(`postgres://postgres@127.0.0.1:${n.port}/postgres`, {
      max: 1,
      onnotice: () => {},
    })
    await admin`create database plants`
    await admin.end()
    const db = postgres(n.url, { max: 1, onnotice: () => {} })
    await db`create extension citus`
    await db.end()
  }
  const sql = postgres(coordinator.url, { max: 4, onnotice: () => {} })
  t.after(() => sql.end({ timeout: 5 }))
  await sql`select citus_set_coordinator_host('127.0.0.1', ${coordinator.port})`
  for (const w of workers) await sql`select citus_add_node('127.0.0.1', ${w.port})`
  return { coordinator, workers, sql }
}
