import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chown, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import postgres from 'postgres'
import { ensurePostgresUser } from '../../src/db/start/embedded.ts'
import { postgres15Bin } from './citus.ts'
import type { Cleanup } from './database.ts'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

const run = promisify(execFile)

/** Debian's patroni and etcd-server packages (PATRONI_PATH, ETCD_PATH to use others). */
export const patroniPath = process.env.PATRONI_PATH || '/usr/bin/patroni'
export const etcdPath = process.env.ETCD_PATH || '/usr/bin/etcd'

/** Why a Patroni cluster cannot run here, or undefined when it can. */
export function patroniUnavailable(): string | undefined {
  for (const [what, path] of [
    ['patroni', patroniPath],
    ['etcd-server', etcdPath],
    ['postgresql-15', join(postgres15Bin, 'postgres')],
  ] as const)
    if (!existsSync(path)) return `no ${what} here (${path}); apt-get install ${what}`
  return undefined
}

/** One Patroni member: its PostgreSQL port and its REST port. */
export type PatroniMember = { readonly name: string; readonly port: number; readonly rest: number }

export function spawnLogged(command: string, args: string[], options: object) {
  const child: ChildProcess = spawn(command, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...options,
  })
  let output = ''
  const keep = (c: Buffer) => {
    output = (output + c.toString()).slice(-6000)
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  const exited = new Promise((r) => child.on('exit', r))
  return { child, exited, output: () => output }
}

/** Who the servers run as: user postgres when the tests run as root; `own` hands it a path. */
export async function serverUser() {
  if (process.getuid?.() === 0) await ensurePostgresUser()
  const id = async (flag: string) => Number((await run('id', [flag, 'postgres'])).stdout.trim())
  const user: { uid?: number; gid?: number } =
    process.getuid?.() === 0 ? { uid: await id('-u'), gid: await id('-g') } : {}
  const own = async (path: string) => {
    if (user.uid !== undefined && user.gid !== undefined) await chown(path, user.uid, user.gid)
  }
  return { user, own }
}

/** One etcd 3 on 127.0.0.1, its data in `dir`, stopped after `t`; resolves with its client port. */
export async function startEtcd(t: Cleanup, dir: string): Promise<number> {
  const client = await serverPort()
  const peer = await serverPort()
  const etcd = spawnLogged(
    etcdPath,
    [
      '--name=e0',
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=http://127.0.0.1:${client}`,
      `--advertise-client-urls=http://127.0.0.1:${client}`,
      `--listen-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-cluster=e0=http://127.0.0.1:${peer}`,
    ],
    {},
  )
  t.after(async () => {
    etcd.child.kill('SIGTERM')
    await etcd.exited
  })
  await within(15_000, async () => {
    try {
      return (await fetch(`http://127.0.0.1:${client}/health`)).ok
    } catch {
      return false
    }
  }).catch(() => {
    throw new Error(`etcd did not start: ${etcd.output()}`)
  })
  return client
}

/** What a member's configuration adds to the one every member shares (`writeMemberConfig`). */
export type MemberSettings = {
  /** Patroni's Citus mode: the member's group, and the database Citus is made in. */
  readonly citus?: { readonly group: number; readonly database: string }
  /** PostgreSQL settings kept in etcd, the same on every member. */
  readonly dcsParameters?: Record<string, unknown>
  /** PostgreSQL settings of this member's own. */
  readonly parameters?: Record<string, unknown>
  /** How a standby copies its primary (`basebackup` options). */
  readonly basebackup?: Record<string, unknown>
}

/**
 * Writes the Patroni configuration of `member` into `dir`, with its home `dir/<name>` made and
 * both handed to the servers' user (`own`); resolves with their paths. Every member: scope
 * `plants`, etcd 3 at `etcd`, timings as Patroni's docs advise (`loop_wait + 2 × retry_timeout ≤
 * ttl`), `synchronous_mode`, PostgreSQL 15 with fsync off and trust on 127.0.0.1, superuser and
 * replication user `postgres`.
 */
export async function writeMemberConfig(
  dir: string,
  own: (path: string) => Promise<void>,
  member: PatroniMember,
  etcd: number,
  { citus, dcsParameters = {}, parameters = {}, basebackup }: MemberSettings = {},
): Promise<{ config: string; home: string }> {
  const { name } = member
  const home = join(dir, name)
  await mkdir(home)
  await own(home)
  const config = join(dir, `${name}.yml`)
  await writeFile(
    config,
    JSON.stringify({
      scope: 'plants',
      name,
      ...(citus && { citus }),
      restapi: {
        listen: `127.0.0.1:${member.rest}`,
        connect_address: `127.0.0.1:${member.rest}`,
      },
      etcd3: { hosts: `127.0.0.1:${etcd}` },
      bootstrap: {
        dcs: {
          ttl: 10,
          loop_wait: 1,
          retry_timeout: 4,
          synchronous_mode: true,
          postgresql: {
            use_pg_rewind: false,
            parameters: { hot_standby: 'on', fsync: 'off', ...dcsParameters },
          },
        },
        initdb: [{ encoding: 'UTF8' }, { locale: 'C' }],
        pg_hba: ['host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust'],
      },
      postgresql: {
        listen: `127.0.0.1:${member.port}`,
        connect_address: `127.0.0.1:${member.port}`,
        data_dir: join(home, 'data'),
        bin_dir: postgres15Bin,
        pgpass: join(home, 'pgpass'),
        authentication: {
          superuser: { username: 'postgres', password: 'postgres' },
          replication: { username: 'postgres', password: 'postgres' },
        },
        ...(basebackup && { basebackup }),
        parameters: { unix_socket_directories: home, ...parameters },
      },
    }),
  )
  await own(config)
  return { config, home }
}

/**
 * A Patroni 3 cluster as an operator runs one (Debian's packages): one etcd, and two members of
 * PostgreSQL 15, a leader and a synchronous replica (`synchronous_mode`), with the database
 * `plants`. Timings as Patroni's docs advise (`loop_wait + 2 × retry_timeout ≤ ttl`). Stopped,
 * and its folder removed, after `t`.
 */
export async function startPatroniCluster(t: Cleanup) {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-patroni-')
  const { user, own } = await serverUser()
  await own(dir)
  const client = await startEtcd(tmp, dir)

  const members: PatroniMember[] = []
  const processes: ReturnType<typeof spawnLogged>[] = []
  for (const name of ['n0', 'n1']) {
    const member = { name, port: await serverPort(), rest: await serverPort() }
    members.push(member)
    const { config, home } = await writeMemberConfig(dir, own, member, client, {
      dcsParameters: { wal_level: 'replica' },
    })
    const p = spawnLogged(patroniPath, [config], { ...user, env: { ...process.env, HOME: home } })
    processes.push(p)
    tmp.after(async () => {
      p.child.kill('SIGTERM')
      await p.exited
    })
  }

  // Patroni's REST checks: /primary answers 200 on the leader, /sync on its synchronous replica.
  const answers = async (m: PatroniMember, check: string) => {
    try {
      const res = await fetch(`http://127.0.0.1:${m.rest}/${check}`)
      await res.arrayBuffer()
      return res.status === 200
    } catch {
      return false
    }
  }
  /** The member that leads now, once the other streams to it as its synchronous replica. */
  const leader = async (timeoutMs = 60_000): Promise<PatroniMember> => {
    let found: PatroniMember | undefined
    await within(timeoutMs, async () => {
      found = undefined
      for (const m of members) if (await answers(m, 'primary')) found = m
      const replica = members.find((m) => m !== found)
      return found !== undefined && replica !== undefined && (await answers(replica, 'sync'))
    }).catch(() => {
      throw new Error(
        `no Patroni leader with a synchronous replica: ${processes.map((p) => p.output()).join('\n---\n')}`,
      )
    })
    return found as PatroniMember
  }
  const first = await leader()
  const admin = postgres(`postgres://postgres:postgres@127.0.0.1:${first.port}/postgres`, {
    max: 1,
    onnotice: () => {},
  })
  await admin`create database plants`
  await admin.end()

  return {
    members,
    leader,
    /** Every member, as a multi-host URL of the `plants` database that writes to the leader. */
    url: `postgres://postgres:postgres@${members.map((m) => `127.0.0.1:${m.port}`).join(',')}/plants?target_session_attrs=read-write`,
    urlOf: (m: PatroniMember) => `postgres://postgres:postgres@127.0.0.1:${m.port}/plants`,
    /** A planned switchover to the other member, through the leader's REST API. */
    async switchover(from: PatroniMember): Promise<PatroniMember> {
      const to = members.find((m) => m !== from) as PatroniMember
      const res = await fetch(`http://127.0.0.1:${from.rest}/switchover`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ leader: from.name, candidate: to.name }),
      })
      const text = await res.text()
      if (!res.ok) throw new Error(`the switchover was refused: ${res.status} ${text}`)
      return to
    },
    cleanup: tmp,
  }
}
