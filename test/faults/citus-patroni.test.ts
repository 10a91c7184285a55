import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import postgres, { type Sql } from 'postgres'
import { createToken } from '../../src/auth/token-repository.ts'
import { limits } from '../../src/limits.ts'
import { isFailure } from '../../src/outcome.ts'
import { shardPlacements } from '../../src/plants/citus.ts'
import {
  type CitusMember,
  type CitusPatroniCluster,
  citusPatroniUnavailable,
  startCitusPatroniCluster,
} from '../helpers/citus-patroni.ts'
import { runNpm } from '../helpers/cli.ts'
import { type Drive, driveCreates, lostAcknowledgements, underWay } from '../helpers/drive.ts'
import {
  connectionsTo,
  type ServiceProcess,
  startServiceProcess,
  tokenFor,
} from '../helpers/process.ts'
import { sleep, within } from '../helpers/wait.ts'

// Citus made highly available as its users do it (Patroni 3 in Citus mode, each group a primary
// and a synchronous standby: test/helpers/citus-patroni.ts, .ci/citus-ha.sh), with an instance of
// the service on each group's every node (the coordinator's C, worker group 1's W1, group 2's
// W2), under load through all three while an operator switches a group over or a machine dies.
// The events run in order on one cluster: the switchovers first, then the failovers, each of a
// group the ones before left whole. Outside CI a machine without Patroni, etcd or Citus skips
// this file with the reason; in CI their absence is a failure (.ci/run installs them).
const missing = citusPatroniUnavailable()
const skip = missing !== undefined && !process.env.CI ? missing : false

type Instance = { readonly name: string; readonly service: ServiceProcess; readonly group: number }

/** When pg_dist_node (as `url`'s node has it) named another primary for each group, polled. */
function watchPrimaries(url: string) {
  const sql = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} })
  const changes: { group: number; node: string; at: number }[] = []
  let last = new Map<number, string>()
  let running = true
  const loop = (async () => {
    while (running) {
      try {
        const rows = await sql<{ group: number; node: string }[]>`
          select groupid as group, nodename || ':' || nodeport as node
          from pg_dist_node where noderole = 'primary'`
        const at = performance.now()
        for (const r of rows) {
          const was = last.get(r.group)
          if (was !== undefined && was !== r.node)
            changes.push({ group: r.group, node: r.node, at })
        }
        last = new Map(rows.map((r) => [r.group, r.node]))
      } catch {
        // the node away for a moment
      }
      await sleep(50)
    }
  })()
  return {
    /** When `group`'s row first named `node`. */
    async changed(group: number, node: string, timeoutMs = 60_000): Promise<number> {
      let at: number | undefined
      await within(timeoutMs, async () => {
        at = changes.find((c) => c.group === group && c.node === node)?.at
        return at !== undefined
      })
      return at as number
    },
    async stop() {
      running = false
      await loop
      await sql.end({ timeout: 1 })
    },
  }
}

/** What one instance answered during an event, split by the group that holds each row. */
function tally(drive: Drive, groupOf: (id: string) => number, group: number) {
  const ok = drive.acknowledged
    .map((a, i) => ({ id: a.id, at: drive.acknowledgedAt[i] as number }))
    .filter((a) => groupOf(a.id) === group)
  const unavailable = drive.unavailable
    .map((a, i) => ({ id: a.id, at: drive.unavailableAt[i] as number }))
    .filter((a) => groupOf(a.id) === group)
  return { ok, unavailable }
}

const sent = (d: Drive) => [...d.statuses.values()].reduce((a, b) => a + b, 0)
const share = (d: Drive, status: number) => (d.statuses.get(status) ?? 0) / Math.max(1, sent(d))
const summary = (name: string, d: Drive) =>
  `${name}: ${sent(d)} sent, statuses ${JSON.stringify(Object.fromEntries(d.statuses))}, slowest ${Math.round(d.slowestMs)} ms`

describe('Citus under Patroni in Citus mode (a coordinator group and two worker groups, each a primary and a synchronous standby)', {
  skip,
}, () => {
  let cluster: CitusPatroniCluster
  let instances: Instance[]
  let token: string
  let groupOf: (id: string) => number
  /** A pool on the coordinator group's primary now (closed after the test). */
  const coordinator = async (): Promise<Sql> => {
    const sql = postgres(cluster.urlOf(await cluster.primaryOf(0)), { max: 2, onnotice: () => {} })
    cluster.cleanup.after(() => sql.end({ timeout: 1 }))
    return sql
  }

  // The cluster lives as long as the suite: `after` called in `before` would end it with the hook.
  const cleanups: (() => unknown)[] = []
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup()
  })

  before(async () => {
    assert.equal(missing, undefined, missing)
    cluster = await startCitusPatroniCluster({ after: (fn) => void cleanups.push(fn) })
    // The first instance, on the coordinator group, migrates: plants distributed on 2 workers.
    const start = async (name: string, group: number): Promise<Instance> => ({
      name,
      group,
      service: await startServiceProcess(
        'node',
        { DATABASE_URL: cluster.groupUrl(group) },
        cluster.cleanup,
      ),
    })
    const c = await start('C', 0)
    instances = [c, await start('W1', 1), await start('W2', 2)]
    const sql = await coordinator()
    token = await tokenFor(sql, c.service.base, 'citus-patroni')
    for (const i of instances) await acceptedWithin(i, token, 5000)
    const placementOf = await shardPlacements(sql)
    groupOf = (id) => placementOf(BigInt(id)).group
  })

  /** Resolves with the ms until `instance` accepts `token` (not 401). */
  async function acceptedWithin(instance: Instance, t: string, ms: number): Promise<number> {
    return within(ms, async () => {
      const res = await fetch(`${instance.service.base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t}` },
      })
      await res.arrayBuffer()
      return res.status !== 401
    }).catch(() => {
      throw new Error(`${instance.name} did not accept the new token within ${ms} ms`)
    })
  }

  /** Drives creates through every instance (4 clients each) around `event`. */
  async function underLoad<T>(event: () => Promise<T>, settleMs = 2000) {
    const drives = instances.map((i) => driveCreates(i.service.base, token, { concurrency: 4 }))
    await Promise.all(drives.map((d) => underWay(d)))
    const started = performance.now()
    const result = await event()
    await sleep(settleMs)
    await Promise.all(drives.map((d) => d.stop()))
    return { drives, result, started }
  }

  async function nothingLost(drives: Drive[]) {
    const acknowledged = drives.flatMap((d) => d.acknowledged)
    assert.deepEqual(await lostAcknowledgements(await coordinator(), acknowledged), [])
  }

  /**
   * Prints what each instance answered, the warnings and Citus lines each logged since `from`,
   * and what Patroni logged of the event on the members of `group` (its INFO and WARNING lines
   * about leaders, promotion, demotion and pg_dist_node).
   */
  const report = (event: string, lines: string[], from: number[], group: number) => {
    const logged = instances.flatMap((i, n) => {
      const seen = new Set<string>()
      for (const l of i.service.lines.slice(from[n] ?? 0))
        if (l.level === 'warn' || l.level === 'error' || String(l.message).includes('Citus group'))
          seen.add(`${i.name} ${l.level}: ${l.message}${l.error ? ` (${l.error})` : ''}`)
      return [...seen].slice(0, 12)
    })
    const patroni = cluster.groupOf(group).flatMap((m) =>
      cluster
        .output(m)
        .split('\n')
        .filter((l) =>
          /(INFO|WARNING|ERROR): .*(promot|demot|switchover|failover|leader|Lock owner|pg_dist_node|Cleaning up|acquired)/i.test(
            l,
          ),
        )
        .filter((l) => !/no action\. I am/.test(l))
        .slice(-6)
        .map((l) => `Patroni ${m.name}: ${l}`),
    )
    process.stderr.write(
      `# ${event}\n${[...lines, ...logged, ...patroni].map((l) => `#   ${l}\n`).join('')}`,
    )
  }
  const logMarks = () => instances.map((i) => i.service.lines.length)

  // W1 reads pg_dist_node on its own node, group 1's primary: Patroni updates the coordinator's,
  // and Citus's maintenance daemon copies it to the workers afterwards, retrying every 5 s
  // (citus_update_node in a prepared transaction cannot reach them itself). So W1's bound runs
  // from its own node's update; the coordinator's is reported beside it.
  test('a worker switchover (patronictl switchover of group 2) under load through C, W1 and W2: no 500, nothing lost, 99 % of creates 200, none slower than the deadline; W1 sends group 2 rows to its new primary within 2 s of the pg_dist_node update on its node and closes its connection to the old one', async () => {
    const marks = logMarks()
    const onCoordinator = watchPrimaries(cluster.urlOf(await cluster.primaryOf(0)))
    const onW1 = watchPrimaries(cluster.urlOf(await cluster.primaryOf(1)))
    const w1 = instances[1] as Instance
    const w1Pid = w1.service.child.pid as number
    let moved: { from: CitusMember; to: CitusMember } | undefined
    let named = 0
    let updated = 0
    const { drives, started } = await underLoad(async () => {
      moved = await cluster.switchover(2)
      const node = `127.0.0.1:${moved.to.port}`
      ;[named, updated] = await Promise.all([onCoordinator.changed(2, node), onW1.changed(2, node)])
    })
    await Promise.all([onCoordinator.stop(), onW1.stop()])
    assert.ok(moved)
    const lines = drives.map((d, i) => summary(instances[i]?.name ?? '', d))
    const w1Group2 = tally(drives[1] as Drive, groupOf, 2)
    const firstAfter = w1Group2.ok.find((a) => a.at >= updated)
    lines.push(
      `pg_dist_node named ${moved.to.name} ${Math.round(named - started)} ms after the switchover was asked on the coordinator, ${Math.round(updated - named)} ms later on W1's node; W1's first group-2 200 after that: +${firstAfter ? Math.round(firstAfter.at - updated) : '–'} ms`,
    )
    report('worker switchover (group 2)', lines, marks, 2)
    for (const [i, d] of drives.entries()) {
      const name = instances[i]?.name
      assert.deepEqual(
        [...d.statuses.keys()].filter((s) => s !== 200 && s !== 503),
        [],
        `${name}: ${summary(String(name), d)}`,
      )
      assert.ok(share(d, 200) >= 0.99, summary(String(name), d))
      assert.ok(d.slowestMs <= limits.database.request, summary(String(name), d))
    }
    assert.ok(firstAfter && firstAfter.at - updated <= 2000, lines.join('; '))
    // What W1 held to the old primary is closed.
    await within(2000, async () => connectionsTo(w1Pid, moved?.from.port ?? 0) === 0)
    assert.ok(
      w1.service.lines.some(
        (l) =>
          String(l.message).startsWith('creates of a Citus group go to its new primary') &&
          l.group === 2 &&
          l.node === `127.0.0.1:${moved?.to.port}`,
      ),
      'W1 logs the group primary it now writes to',
    )
    await nothingLost(drives)
  })

  /**
   * A coordinator event under load (`cause` switches group 0 over or kills its primary): the
   * instances on workers go on creating, C (on the group's multi-host URL) answers 200 again
   * within 5 s of the new primary taking writes, a token made there reaches every instance
   * within 5 s (or 2 s after pg_dist_node names it, if that is later), and `npm run migrate`
   * through a worker finds the new primary.
   */
  async function coordinatorEvent(event: string, cause: (from: CitusMember) => Promise<void>) {
    const marks = logMarks()
    // Each worker's own copy of pg_dist_node, which the instance on it reads (W1's, W2's).
    const watches = [
      watchPrimaries(cluster.urlOf(await cluster.primaryOf(1))),
      watchPrimaries(cluster.urlOf(await cluster.primaryOf(2))),
    ]
    const from = await cluster.primaryOf(0)
    let to: CitusMember | undefined
    let writable = 0
    let tokenAccepted: number[] = []
    let updated: number[] = []
    const { drives, started } = await underLoad(async () => {
      await cause(from)
      to = await cluster.primaryOf(0, 60_000)
      const next = postgres(cluster.urlOf(to), { max: 1, connect_timeout: 1, onnotice: () => {} })
      let fresh: string | undefined
      // The token is made the moment the new primary takes writes.
      await within(60_000, async () => {
        const made = await createToken(next, `after-${event}`).catch(() => undefined)
        if (made === undefined || isFailure(made)) return false
        fresh = made
        return true
      })
      writable = performance.now()
      await next.end({ timeout: 1 })
      tokenAccepted = await Promise.all(
        instances.map((i) => acceptedWithin(i, fresh as string, 15_000)),
      )
      const node = `127.0.0.1:${to.port}`
      updated = await Promise.all(watches.map((w) => w.changed(0, node)))
    })
    await Promise.all(watches.map((w) => w.stop()))
    assert.ok(to)
    const c = drives[0] as Drive
    const firstAfter = c.acknowledgedAt.find((at) => at >= writable)
    const lines = drives.map((d, i) => summary(instances[i]?.name ?? '', d))
    lines.push(
      `the new primary ${to.name} took writes ${Math.round(writable - started)} ms after the ${event}; pg_dist_node named it ${updated.map((at) => Math.round(at - writable)).join(' and ')} ms later on W1's and W2's nodes; C's first 200 after: +${firstAfter ? Math.round(firstAfter - writable) : '–'} ms; a token made then accepted by C, W1, W2 after ${tokenAccepted.map(Math.round).join(', ')} ms`,
    )
    report(`coordinator ${event}`, lines, marks, 0)
    for (const [i, d] of drives.entries()) {
      const name = instances[i]?.name ?? ''
      assert.deepEqual(
        [...d.statuses.keys()].filter((s) => s !== 200 && s !== 503),
        [],
        summary(name, d),
      )
      if (i > 0) assert.ok(share(d, 200) >= 0.95, summary(name, d))
      // A planned switchover costs no instance more than 1 % of its creates.
      if (event === 'switchover') assert.ok(share(d, 200) >= 0.99, summary(name, d))
    }
    assert.ok(firstAfter !== undefined && firstAfter - writable <= 5000, lines.join('; '))
    // Instances on workers learn the coordinator from their own node's pg_dist_node
    // (docs/scaling.md), which Patroni updates after the promotion on the coordinator and Citus
    // copies to the workers after that: 7.2 s after it in one CI run. So a token reaches each
    // within 5 s of the new primary taking writes, or within 2 s of its node's pg_dist_node
    // naming it, whichever is later; C, on the coordinator group's URL, within the 5 s.
    for (const [i, ms] of tokenAccepted.entries()) {
      const seen = i === 0 ? writable : (updated[i - 1] as number)
      assert.ok(writable + ms <= Math.max(writable + 5000, seen + 2000), lines.join('; '))
    }
    // Migrations go only to the coordinator's primary, found through a worker's metadata.
    const migrated = await runNpm('migrate', [], {
      DATABASE_URL: cluster.groupUrl(1),
      LOG_LEVEL: 'debug',
    })
    assert.equal(migrated.code, 0, migrated.stderr)
    assert.match(
      migrated.stdout + migrated.stderr,
      new RegExp(`the coordinator at 127\\.0\\.0\\.1:${to.port}`),
    )
    await nothingLost(drives)
  }

  test('a coordinator switchover (group 0) under load: 99 % of creates 200 on every instance, instances on workers go on creating (95 % 200), C on the group URL answers 200 within 5 s of the new primary taking writes, a token made there reaches every instance within 5 s (or 2 s after pg_dist_node names it), migrations find the new primary, no 500, nothing lost', () =>
    coordinatorEvent('switchover', async () => {
      await cluster.switchover(0)
    }))

  // Each instance is bounded by the pg_dist_node it follows: C's and W1's are the coordinator's
  // (W1 reaches its own group through its URL), W2's is its own node's copy, which Citus updates
  // after the coordinator's.
  test('a worker failover (group 1: its primary and its Patroni SIGKILLed) under load: group 1 rows 503 with Retry-After until the promotion, group 2 rows 200 throughout, the first group 1 200 within 2 s of the pg_dist_node update (on the node each instance reads it from) through every instance, no 500, nothing acknowledged lost', async () => {
    const marks = logMarks()
    const watches = [
      watchPrimaries(cluster.urlOf(await cluster.primaryOf(0))),
      watchPrimaries(cluster.urlOf(await cluster.primaryOf(2))),
    ]
    const from = await cluster.leaderOf(1)
    let to: CitusMember | undefined
    let named: number[] = []
    const { drives, started } = await underLoad(async () => {
      cluster.kill(from)
      to = await cluster.primaryOf(1, 60_000)
      const node = `127.0.0.1:${to.port}`
      named = await Promise.all(watches.map((w) => w.changed(1, node)))
    })
    await Promise.all(watches.map((w) => w.stop()))
    assert.ok(to)
    const [onCoordinator = 0, onW2 = 0] = named
    const updatedFor = [onCoordinator, onCoordinator, onW2]
    const lines = drives.map((d, i) => summary(instances[i]?.name ?? '', d))
    lines.push(
      `pg_dist_node named ${to.name} ${Math.round(onCoordinator - started)} ms after the kill on the coordinator, ${Math.round(onW2 - onCoordinator)} ms later on W2's node`,
    )
    for (const [i, d] of drives.entries()) {
      const name = instances[i]?.name ?? ''
      const updated = updatedFor[i] as number
      const failed = tally(d, groupOf, 1)
      const other = tally(d, groupOf, 2)
      const firstAfter = failed.ok.find((a) => a.at >= updated)
      lines.push(
        `${name}: group 1 ${failed.ok.length} × 200, ${failed.unavailable.length} × 503, first 200 after the update +${firstAfter ? Math.round(firstAfter.at - updated) : '–'} ms; group 2 ${other.ok.length} × 200, ${other.unavailable.length} × 503`,
      )
    }
    report('worker failover (group 1)', lines, marks, 1)
    for (const [i, d] of drives.entries()) {
      const name = instances[i]?.name ?? ''
      assert.deepEqual(
        [...d.statuses.keys()].filter((s) => s !== 200 && s !== 503),
        [],
        summary(name, d),
      )
      assert.ok(
        d.answers.every((a) => a.status !== 503 || a.retryAfter !== null),
        `${name}: a 503 without Retry-After`,
      )
      assert.equal(tally(d, groupOf, 2).unavailable.length, 0, `${name}: ${lines.join('; ')}`)
      const updated = updatedFor[i] as number
      const firstAfter = tally(d, groupOf, 1).ok.find((a) => a.at >= updated)
      assert.ok(firstAfter && firstAfter.at - updated <= 2000, `${name}: ${lines.join('; ')}`)
    }
    await nothingLost(drives)
  })

  test('a coordinator failover (group 0: its primary and its Patroni SIGKILLed) under load: instances on workers go on creating (95 % 200), C answers 200 within 5 s of the promotion, a token made on the new primary reaches every instance within 5 s (or 2 s after pg_dist_node names it), migrations find it, no 500, nothing lost', () =>
    coordinatorEvent('failover', async (from) => {
      cluster.kill(from)
    }))
})
