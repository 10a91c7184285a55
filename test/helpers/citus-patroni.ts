import { execFile } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import postgres from 'postgres'
import { citusUnavailable } from './citus.ts'
import type { Cleanup } from './database.ts'
import {
  type PatroniMember,
  patroniPath,
  patroniUnavailable,
  serverUser,
  spawnLogged,
  startEtcd,
  writeMemberConfig,
} from './patroni.ts'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

const run = promisify(execFile)
/** Debian's patronictl, from the patroni package (PATRONICTL_PATH to use another). */
const patronictlPath = process.env.PATRONICTL_PATH || '/usr/bin/patronictl'

// Citus made highly available as its users do it: Patroni 3 in Citus mode (Debian's patroni and
// etcd-server), one Patroni cluster per Citus group under one `scope`, each group a primary and a
// synchronous standby. Patroni on the coordinator's primary keeps pg_dist_node pointing at each
// group's primary (citus_add_node, citus_update_node) and, on a planned switchover of a worker
// group, holds the coordinator's distributed transactions while it changes the row.

/** Why the cluster cannot run here, or undefined when it can. */
export function citusPatroniUnavailable(): string | undefined {
  return patroniUnavailable() ?? citusUnavailable()
}

/** One member of a group: PostgreSQL's and Patroni's REST ports, its postmaster. */
export type CitusMember = PatroniMember & {
  readonly group: number
  /** The postmaster's process id, from its postmaster.pid, while it runs. */
  readonly postmasterPid: () => number | undefined
}

export type CitusPatroniCluster = Awaited<ReturnType<typeof startCitusPatroniCluster>>

const rest = async (m: PatroniMember, path: string, init?: RequestInit, timeoutMs = 2000) => {
  try {
    const res = await fetch(`http://127.0.0.1:${m.rest}${path}`, {
      ...init,
      signal: AbortSignal.timeout(timeoutMs),
    })
    const text = await res.text()
    return { status: res.status, text }
  } catch {
    return { status: 0, text: '' }
  }
}

/**
 * Starts etcd and `groups` Citus groups (0 the coordinator, 1… the workers), each of `members`
 * Patroni members of PostgreSQL 15 with Citus, in a new temporary folder; resolves once every
 * group has a leader with a synchronous standby and the coordinator's pg_dist_node names every
 * group's leader. Everything is stopped and removed after `t`. `log` hears what is happening.
 */
export async function startCitusPatroniCluster(
  t: Cleanup,
  { groups = 3, members: perGroup = 2, log = (_: string) => {} } = {},
) {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-citus-patroni-')
  const { user, own } = await serverUser()
  await own(dir)
  const client = await startEtcd(tmp, dir)
  log(`etcd listens on 127.0.0.1:${client}`)

  const members: CitusMember[] = []
  const outputs = new Map<string, () => string>()
  const start = async (member: CitusMember, config: string, home: string) => {
    const p = spawnLogged(patroniPath, [config], { ...user, env: { ...process.env, HOME: home } })
    outputs.set(member.name, p.output)
    running.set(member.name, p)
  }
  const running = new Map<string, ReturnType<typeof spawnLogged>>()
  const configs = new Map<string, { config: string; home: string }>()
  tmp.after(async () => {
    for (const p of running.values()) p.child.kill('SIGTERM')
    await Promise.all([...running.values()].map((p) => p.exited))
    // A postmaster whose Patroni was killed outlives it: stop it from its pid file.
    for (const m of members) {
      const pid = m.postmasterPid()
      if (pid !== undefined)
        try {
          process.kill(pid, 'SIGQUIT')
        } catch {}
    }
  })
  for (let group = 0; group < groups; group++) {
    for (let n = 0; n < perGroup; n++) {
      const name = `g${group}n${n}`
      const data = join(dir, name, 'data')
      const port = await serverPort()
      const member: CitusMember = {
        name,
        group,
        port,
        rest: await serverPort(),
        postmasterPid: () => {
          const file = join(data, 'postmaster.pid')
          if (!existsSync(file)) return undefined
          const pid = Number(readFileSync(file, 'utf8').split('\n')[0])
          try {
            process.kill(pid, 0)
            return pid
          } catch {
            return undefined
          }
        },
      }
      members.push(member)
      const { config, home } = await writeMemberConfig(dir, own, member, client, {
        // One scope for every group; `citus.group` tells them apart.
        citus: { group, database: 'plants' },
        dcsParameters: { max_connections: 300, 'citus.node_conninfo': 'sslmode=disable' },
        // Citus connects to its own node by this name (Patroni's Citus documentation).
        parameters: { 'citus.local_hostname': '127.0.0.1' },
        // A standby's copy starts at once rather than after the next checkpoint.
        basebackup: { checkpoint: 'fast' },
      })
      configs.set(name, { config, home })
      await start(member, config, home)
    }
  }

  const groupOf = (group: number) => members.filter((m) => m.group === group)
  /** The group's member that leads now, once another streams to it as its synchronous standby. */
  const leaderOf = async (group: number, timeoutMs = 60_000): Promise<CitusMember> => {
    let found: CitusMember | undefined
    const of = groupOf(group)
    await within(timeoutMs, async () => {
      found = undefined
      for (const m of of) if ((await rest(m, '/primary')).status === 200) found = m
      if (found === undefined) return false
      if (of.length === 1) return true
      for (const m of of) if (m !== found && (await rest(m, '/sync')).status === 200) return true
      return false
    }).catch(() => {
      throw new Error(
        `group ${group}: no Patroni leader with a synchronous standby within ${timeoutMs} ms: ${of
          .map((m) => `${m.name}: ${outputs.get(m.name)?.()}`)
          .join('\n---\n')}`,
      )
    })
    return found as CitusMember
  }
  /** The group's member that leads now, a standby or not (a group whose other member died). */
  const primaryOf = async (group: number, timeoutMs = 60_000): Promise<CitusMember> => {
    let found: CitusMember | undefined
    await within(timeoutMs, async () => {
      for (const m of groupOf(group)) if ((await rest(m, '/primary')).status === 200) found = m
      return found !== undefined
    }).catch(() => {
      throw new Error(
        `group ${group}: no Patroni leader within ${timeoutMs} ms: ${groupOf(group)
          .map((m) => `${m.name}: ${outputs.get(m.name)?.()}`)
          .join('\n---\n')}`,
      )
    })
    return found as CitusMember
  }
  const urlOf = (m: PatroniMember, database = 'plants') =>
    `postgres://postgres:postgres@127.0.0.1:${m.port}/${database}`
  /** Every member of `group`, as a multi-host URL that writes to its primary. */
  const groupUrl = (group: number) =>
    `postgres://postgres:postgres@${groupOf(group)
      .map((m) => `127.0.0.1:${m.port}`)
      .join(',')}/plants?target_session_attrs=read-write`
  /** pg_dist_node's primaries as the coordinator's leader has them: group → `host:port`. */
  const distNodes = async (): Promise<Map<number, string>> => {
    const leader = await leaderOf(0)
    const sql = postgres(urlOf(leader), { max: 1, connect_timeout: 2, onnotice: () => {} })
    try {
      const rows = await sql<{ group: number; node: string }[]>`
        select groupid as group, nodename || ':' || nodeport as node
        from pg_dist_node where noderole = 'primary' order by groupid`
      return new Map(rows.map((r) => [r.group, r.node]))
    } finally {
      await sql.end({ timeout: 1 })
    }
  }
  /** Resolves once pg_dist_node names each group's Patroni leader; returns the leaders. */
  const settled = async (timeoutMs = 60_000): Promise<CitusMember[]> => {
    let leaders: CitusMember[] = []
    await within(timeoutMs, async () => {
      leaders = []
      for (let g = 0; g < groups; g++) leaders.push(await leaderOf(g, timeoutMs))
      const nodes = await distNodes().catch(() => new Map<number, string>())
      return leaders.every((l) => nodes.get(l.group) === `127.0.0.1:${l.port}`)
    })
    return leaders
  }

  const started = performance.now()
  const leaders = await settled(120_000)
  log(
    `every group has a leader with a synchronous standby and pg_dist_node names them, ${Math.round(performance.now() - started)} ms after Patroni started`,
  )

  return {
    dir,
    etcd: client,
    members,
    groups,
    groupOf,
    leaderOf,
    primaryOf,
    urlOf,
    groupUrl,
    distNodes,
    settled,
    leaders,
    /** What Patroni of `member` printed last. */
    output: (m: CitusMember) => outputs.get(m.name)?.() ?? '',
    /**
     * A planned switchover of `group` to its other member, as an operator makes it:
     * `patronictl switchover --group G --leader … --candidate … --force`, which returns once
     * Patroni has done it.
     */
    async switchover(group: number): Promise<{ from: CitusMember; to: CitusMember }> {
      const from = await leaderOf(group)
      const to = groupOf(group).find((m) => m !== from) as CitusMember
      const config = configs.get(members[0]?.name ?? '')?.config
      if (config === undefined) throw new Error('no member to read the configuration of')
      const args = ['-c', config, 'switchover', '--group', String(group)]
      await run(
        patronictlPath,
        [...args, '--leader', from.name, '--candidate', to.name, '--force'],
        {
          timeout: 60_000,
        },
      ).catch((err: { stdout?: string; stderr?: string }) => {
        throw new Error(`patronictl switchover failed: ${err.stdout ?? ''} ${err.stderr ?? ''}`)
      })
      return { from, to }
    },
    /** SIGKILLs `member`'s Patroni and then its postmaster: a machine lost. */
    kill(member: CitusMember): void {
      const postmaster = member.postmasterPid()
      running.get(member.name)?.child.kill('SIGKILL')
      if (postmaster !== undefined) process.kill(postmaster, 'SIGKILL')
    },
    cleanup: tmp,
  }
}
