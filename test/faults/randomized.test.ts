import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import { limits } from '../../src/limits.ts'
import { keptAliveClient } from '../helpers/drive.ts'
import {
  type FaultSpan,
  type Heal,
  indeterminate,
  judge,
  type Op,
  type Sent,
  seeded,
  sendCreate,
  shuffled,
  unavailableByFault,
} from '../helpers/history.ts'
import { partition, partitionUnavailable } from '../helpers/partition.ts'
import { startServiceProcess, tokenFor } from '../helpers/process.ts'
import {
  connect,
  failOver,
  type Server,
  startPrimaryAndStandby,
  startServer,
} from '../helpers/replication.ts'
import { sleep } from '../helpers/wait.ts'

// A Jepsen-style run: the service as `npm start` runs it with WORKERS=2, on a URL listing a
// PostgreSQL 18 primary and its synchronous standby; 8 clients sending fresh ids, exact retries
// and conflicting contents; a seeded order of faults, each followed by a calm; then every create
// whose outcome is unknown sent again, and the whole history judged against the table
// (test/helpers/history.ts). A failure prints its seed; `npm run test:faults -- --seed N`
// replays it. CI runs the seeds below.
const ciSeeds = [1, 2]
const seeds = (process.env.PLANT_STORE_FAULT_SEEDS?.split(',') ?? ciSeeds).map(Number)

/** After each fault's end, this long of calm before the next, so that recovery can be seen. */
const calmMs = 5_500

/** The processes a fault may act on. */
type Stage = {
  primary: Server
  readonly primaryDir: string
  readonly standby: Server
  readonly restart: () => Promise<Server>
  readonly service: Awaited<ReturnType<typeof startServiceProcess>>
  readonly cleanup: { after: (fn: () => unknown) => void }
  /** Kill times of workers, with the time their requests may still end in a reset. */
  readonly resetWindows: [number, number][]
}

/** The process ids of `pid`'s children, from /proc. */
function childrenOf(pid: number): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === pid) found.push(Number(entry))
    } catch {
      // The process ended meanwhile.
    }
  }
  return found
}

/** A fault: does its harm, ends it, and resolves with the moment it ended. */
type Fault = { readonly name: string; readonly run: (stage: Stage) => Promise<number> }

const faults: Fault[] = [
  {
    name: 'the postmaster killed (SIGKILL), then started again',
    async run(stage) {
      stage.primary.child.kill('SIGKILL')
      await stage.primary.exited
      await sleep(1000)
      stage.primary = await stage.restart()
      return performance.now()
    },
  },
  {
    name: 'the database frozen (SIGSTOP) for 8 s',
    async run(stage) {
      const pid = stage.primary.child.pid ?? 0
      const all = [pid, ...childrenOf(pid)]
      for (const p of all) process.kill(p, 'SIGSTOP')
      await sleep(8000)
      for (const p of all) process.kill(p, 'SIGCONT')
      return performance.now()
    },
  },
  {
    name: 'a 10 s silent partition between the service and the primary',
    async run(stage) {
      const cut = partition(stage.primary.port, 'both', stage.cleanup, '127.0.0.2')
      await sleep(10_000)
      cut.heal()
      return performance.now()
    },
  },
  {
    name: 'a fast restart (SIGINT, then started again)',
    async run(stage) {
      stage.primary.child.kill('SIGINT')
      await stage.primary.exited
      stage.primary = await stage.restart()
      return performance.now()
    },
  },
  {
    name: "every one of the service's backends terminated",
    async run(stage) {
      const admin = connect(stage.primary.port, 'postgres')
      await admin`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name like 'plant-store%'`
      await admin.end()
      return performance.now()
    },
  },
  {
    name: 'a worker killed (SIGKILL)',
    async run(stage) {
      const ready = stage.service.lines.filter((l) => String(l.message).startsWith('worker ready'))
      const victim = ready[ready.length - 1]
      const killed = performance.now()
      process.kill(Number(victim?.pid), 'SIGKILL')
      // Its requests end at once, as resets; the other worker answers meanwhile.
      stage.resetWindows.push([killed, killed + 1000])
      return killed
    },
  },
]

/** The failover, last when chosen: after it there is no standby. */
const failover: Fault = {
  name: 'a failover (the primary killed, the standby promoted 0.6 s later)',
  run: (stage) => failOver(stage.primary, stage.standby),
}

/** The seeded order: the six faults shuffled, then the failover when the seed says so. */
function plan(random: () => number, partitions: boolean): Fault[] {
  const order = shuffled(
    faults.filter((f) => partitions || !f.name.includes('partition')),
    random,
  )
  return random() < 0.5 ? [...order, failover] : order
}

// The partition needs root and iptables, which CI has; elsewhere it is left out with a line.
const noPartition = partitionUnavailable()
if (noPartition !== undefined && process.env.CI === undefined)
  process.stderr.write(
    `test/faults/randomized.test.ts: the partition is left out: ${noPartition}\n`,
  )

// Each seed runs on servers, ports and a service of its own: the seeds run at once.
describe('a randomized fault run, judged from the whole history', { concurrency: true }, () => {
  for (const seed of seeds)
    test(`seed ${seed}: acknowledged = stored, one winner, 40009 only for a real conflict, no row from nowhere, every answer well-formed and within the deadline + 1.5 s, no 503 in a fault shorter than the deadline for a create with 1 s of its deadline left after it, the first 200 within 5 s of every heal, every indeterminate create converging on retry`, async (t) => {
      const random = seeded(seed)
      const order = plan(random, noPartition === undefined || process.env.CI !== undefined)
      const { primary, standby, primaryDir, cleanup } = await startPrimaryAndStandby(t)
      const hosts = `127.0.0.2:${primary.port},127.0.0.2:${standby.port}`
      const service = await startServiceProcess(
        'node',
        {
          DATABASE_URL: `postgres://postgres@${hosts}/plants?target_session_attrs=read-write`,
          WORKERS: '2',
        },
        cleanup,
      )
      const firstSql = connect(primary.port)
      const token = await tokenFor(firstSql, service.base, `randomized-${seed}`)
      await firstSql.end()
      const stage: Stage = {
        primary,
        primaryDir,
        standby,
        restart: () => startServer(primaryDir, primary.port, cleanup),
        service,
        cleanup,
        resetWindows: [],
      }

      // The load: fresh ids, exact retries of earlier creates, and earlier ids with other contents.
      const history: Op[] = []
      const sentSoFar: Sent[] = []
      let running = true
      let next = BigInt(seed) * 1_000_000_000n
      const pick = (): [Sent, Op['kind']] => {
        const r = random()
        const earlier = sentSoFar[Math.floor(random() * sentSoFar.length)]
        if (earlier && r < 0.15) return [earlier, 'retry']
        if (earlier && r < 0.25)
          return [{ id: earlier.id, name: `${earlier.name} (other)`, tag: earlier.tag }, 'conflict']
        next += 1n + BigInt(Math.floor(random() * 1000))
        const id = (random() < 0.5 ? -next : next).toString()
        return [{ id, name: `plant ${id}`, tag: random() < 0.5 ? 'fault' : null }, 'fresh']
      }
      const client = keptAliveClient(`${service.base}/plants`, 8)
      t.after(() => client.close())
      const clients = Array.from({ length: 8 }, async () => {
        while (running) {
          const [plant, kind] = pick()
          if (kind === 'fresh') sentSoFar.push(plant)
          history.push(await sendCreate(client, token, plant, kind))
        }
      })

      const heals: Heal[] = []
      const spans: FaultSpan[] = []
      const started = performance.now()
      const timeline: string[] = []
      try {
        await sleep(2000)
        for (const fault of order) {
          const from = performance.now()
          const at = await fault.run(stage)
          heals.push({ fault: fault.name, at })
          spans.push({ fault: fault.name, from, to: at })
          timeline.push(
            `${fault.name}: ${Math.round(from - started)} to ${Math.round(at - started)} ms`,
          )
          await sleep(calmMs)
        }
      } finally {
        running = false
        await Promise.all(clients)
      }

      // Every create whose outcome is unknown, sent again until it is known.
      const newPrimary = order.includes(failover) ? standby : stage.primary
      const unknown = history.filter(indeterminate)
      const retried: Op[] = []
      for (const op of unknown) {
        let again = await sendCreate(client, token, op.plant, 'final retry')
        for (let i = 0; i < 10 && indeterminate(again); i++) {
          await sleep(500)
          again = await sendCreate(client, token, op.plant, 'final retry')
        }
        retried.push(again)
      }
      const sql = connect(newPrimary.port)
      const rows = await sql<{ id: string; name: string; tag: string | null }[]>`
        select id::text, name, tag from plants`
      await sql.end()
      const stored = new Map(rows.map((r) => [r.id, { name: r.name, tag: r.tag }]))
      const problems = judge([...history, ...retried], stored, {
        heals,
        resetWindows: stage.resetWindows,
        deadlineMs: limits.database.request + 1500,
        recoveryMs: 5000,
      })
      // A fault shorter than the deadline is waited out: a 503 in it, for a create that had time
      // left after it, is a problem.
      const byFault = unavailableByFault(history, spans, { deadlineMs: limits.database.request })
      problems.push(...byFault.problems)
      const unresolved = retried.filter(indeterminate)
      for (const op of unresolved)
        problems.push(`an indeterminate create of ${op.plant.id} did not converge on retry`)

      const tally: Record<string, number> = {}
      for (const op of history) tally[String(op.ending)] = (tally[String(op.ending)] ?? 0) + 1
      const firsts = heals.map((h) => {
        const first = history.find((op) => op.ending === 200 && op.answeredAt >= h.at)
        return first === undefined ? 'never' : `${Math.round(first.answeredAt - h.at)} ms`
      })
      process.stderr.write(
        `# seed ${seed}: ${history.length} creates ${JSON.stringify(tally)}, ${unknown.length} indeterminate (${retried.filter((o) => o.ending === 200).length} stored on retry, ${retried.filter((o) => o.ending === 400).length} 40009), ${rows.length} rows; faults: ${order.map((f, i) => `${f.name} (${Math.round(((spans[i]?.to ?? 0) - (spans[i]?.from ?? 0)) / 100) / 10} s, ${byFault.tally[f.name] ?? 0} × 503, first 200 ${firsts[i]} after)`).join('; ')}\n`,
      )
      assert.deepEqual(
        problems.slice(0, 20),
        [],
        `seed ${seed} (replay: npm run test:faults -- --seed ${seed}); ${problems.length} problems; timeline: ${timeline.join('; ')}`,
      )
    })
})
