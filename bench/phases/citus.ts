import os from 'node:os'
import postgres, { type Sql } from 'postgres'
import { createToken } from '../../src/auth/token-repository.ts'
import { migrate } from '../../src/db/start/migrate.ts'
import { limits } from '../../src/limits.ts'
import { createLog } from '../../src/log.ts'
import { isFailure } from '../../src/outcome.ts'
import { citusUnavailable, startCitusCluster, startPostgres15 } from '../../test/helpers/citus.ts'
import { type Bench, f, median, say } from '../bench.ts'
import { runPgbench } from '../pgbench.ts'
import { cpuSeconds, serverCpuSeconds, spawnService, stop } from '../processes.ts'

/** CPU µs per create: the coordinator's, both workers' (per row they store), and the client's. */
type Cpu = { coordinatorUs: number; workersUs: number; clientUs: number }
type Round = Record<string, { rps: number; p99: number; workerConnections: number } & Cpu>

/** Connections the coordinator has opened to its workers so far (citus_stat_counters). */
async function workerConnections(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: string }[]>`
    select coalesce(sum(connection_establishment_succeeded), 0)::text as n
    from citus_stat_counters`
  return Number(row?.n)
}

/**
 * The service on a Citus cluster (Debian's PostgreSQL 15 with Citus 13.2.2, built by
 * .ci/citus.sh: a coordinator and two workers on this machine, fsync on), pgbench single-row
 * inserts on the same coordinator, and the service on a plain PostgreSQL 15 beside it,
 * interleaved in rounds whose order rotates: req/s, p99, and the worker connections the
 * coordinator opened during each measured run.
 */
export async function citusPhase(bench: Bench, shards?: number) {
  const { options } = bench
  const missing = citusUnavailable()
  if (missing) {
    say(`citus: skipped: ${missing}`)
    return undefined
  }
  const cleanups: (() => unknown)[] = []
  const t = { after: (fn: () => unknown) => void cleanups.push(fn) }
  try {
    const cluster = await startCitusCluster(t, { fsync: true })
    const plain = await startPostgres15(t, { fsync: true })
    const quiet = createLog('error', () => {})
    const tokens: Record<string, string> = {}
    for (const [name, url] of [
      ['citus', cluster.coordinator.url],
      ['plain', plain.url],
    ] as const) {
      await migrate(url, quiet)
      const sql = postgres(url, { max: 1, onnotice: () => {} })
      const token = await createToken(sql, `bench-${name}`)
      await sql.end()
      if (isFailure(token)) throw new Error(token.message)
      tokens[name] = token
    }
    // --citus-shards N: plants redistributed into N shards, as a DBA would change it.
    if (shards !== undefined)
      await cluster.sql`select alter_distributed_table('plants', shard_count := ${shards})`
    // CPU of the coordinator's and the workers' servers (each postmaster with its backends).
    const nodeCpu = () => ({
      coordinator: serverCpuSeconds(cluster.coordinator.pid() ?? 0),
      workers: cluster.workers.reduce((sum, w) => sum + serverCpuSeconds(w.pid() ?? 0), 0),
    })
    const cpuPer = (before: ReturnType<typeof nodeCpu>, client: number, creates: number): Cpu => {
      const now = nodeCpu()
      return {
        coordinatorUs: ((now.coordinator - before.coordinator) / creates) * 1e6,
        workersUs: ((now.workers - before.workers) / creates) * 1e6,
        clientUs: (client / creates) * 1e6,
      }
    }
    const [layout] = await cluster.sql<{ shards: number; workers: number }[]>`
      select count(*)::int as shards, count(distinct nodeport)::int as workers
      from citus_shards where table_name = 'plants'::regclass`
    const plainSql = postgres(plain.url, { max: 1, onnotice: () => {} })
    cleanups.push(() => plainSql.end())
    const kinds = [
      'service on Citus',
      'service through the workers',
      'pgbench on Citus',
      'service on PostgreSQL 15',
    ] as const
    say('')
    say(
      `citus: a coordinator and two workers (PostgreSQL 15, Citus 13.2.2, fsync on; plants in ${layout?.shards} shards on ${layout?.workers} workers, ${shards === undefined ? 'as npm run migrate makes it' : 'by --citus-shards'}) and a plain PostgreSQL 15 on this machine; 64 connections, ids at random, ${options.warmup} s warm-up + ${options.seconds} s`,
    )
    say(
      `round  ${kinds.map((k) => k.padStart(26)).join('  ')}   (req/s or tx/s, p99 ms, new worker connections)`,
    )
    const rounds: Round[] = []
    for (let round = 1; round <= options.runs; round++) {
      const got: Round = {}
      const order = kinds.map((_, i) => kinds[(i + round - 1) % kinds.length] as string)
      for (const kind of order) {
        const onCitus = kind.endsWith('Citus') || kind === 'service through the workers'
        const sql = onCitus ? cluster.sql : plainSql
        await sql`truncate plants`
        if (kind === 'pgbench on Citus') {
          await runPgbench({
            url: cluster.coordinator.url,
            connections: 64,
            seconds: options.warmup,
          })
          const before = await workerConnections(cluster.sql)
          const cpu = nodeCpu()
          const p = await runPgbench({
            url: cluster.coordinator.url,
            connections: 64,
            seconds: options.seconds,
          })
          got[kind] = {
            rps: p.tps,
            p99: Number.NaN,
            workerConnections: (await workerConnections(cluster.sql)) - before,
            ...cpuPer(cpu, Number.NaN, p.tps * options.seconds),
          }
          continue
        }
        if (kind === 'service through the workers') {
          // One instance on each worker's URL, the load split between them (32 connections
          // each), each with ids of its own: the coordinator is off the create path.
          const services = await Promise.all(
            cluster.workers.map((w, i) => spawnService(`${kind} ${i + 1}`, w.url)),
          )
          try {
            const token = tokens.citus ?? ''
            const both = (seconds: number) => {
              const first = bench.nextId()
              return Promise.all(
                services.map((service, i) =>
                  bench.load(service, 32, seconds, {
                    randomIds: true,
                    token,
                    firstId: first + BigInt(i) * 1_000_000_000_000n,
                  }),
                ),
              )
            }
            await both(options.warmup)
            const before = await workerConnections(cluster.sql)
            const cpu = nodeCpu()
            const own = services.reduce((sum, x) => sum + cpuSeconds(x.child.pid ?? 0), 0)
            const runs = await both(options.seconds)
            const rps = runs.reduce((sum, r) => sum + r.rps, 0)
            got[kind] = {
              rps,
              p99: Math.max(...runs.map((r) => r.p99)),
              workerConnections: (await workerConnections(cluster.sql)) - before,
              ...cpuPer(
                cpu,
                services.reduce((sum, x) => sum + cpuSeconds(x.child.pid ?? 0), 0) - own,
                rps * options.seconds,
              ),
            }
            const errors = runs.reduce((sum, r) => sum + r.errors, 0)
            if (errors > 0) say(`  ${kind}: ${errors} errors`)
          } finally {
            for (const service of services) await stop(service)
          }
          continue
        }
        const url = onCitus ? cluster.coordinator.url : plain.url
        const service = await spawnService(kind, url)
        try {
          const token = tokens[onCitus ? 'citus' : 'plain'] ?? ''
          await bench.load(service, 64, options.warmup, { randomIds: true, token })
          const before = onCitus ? await workerConnections(cluster.sql) : 0
          const cpu = nodeCpu()
          const own = cpuSeconds(service.child.pid ?? 0)
          const r = await bench.load(service, 64, options.seconds, { randomIds: true, token })
          const creates = r.rps * options.seconds
          got[kind] = {
            rps: r.rps,
            p99: r.p99,
            workerConnections: onCitus ? (await workerConnections(cluster.sql)) - before : 0,
            ...cpuPer(cpu, cpuSeconds(service.child.pid ?? 0) - own, creates),
          }
          if (r.errors > 0) say(`  ${kind}: ${r.errors} errors`)
        } finally {
          await stop(service)
        }
      }
      rounds.push(got)
      say(
        `${f(round, 5)}  ${kinds.map((k) => `${f(got[k]?.rps ?? Number.NaN, 8)} ${Number.isNaN(got[k]?.p99 ?? Number.NaN) ? '-'.padStart(6) : f(got[k]?.p99 ?? 0, 6, 1)} ${f(got[k]?.workerConnections ?? Number.NaN, 6)}`.padStart(26)).join('  ')}`,
      )
    }
    const med = (k: string, key: 'rps' | 'p99' | 'workerConnections') =>
      median(rounds.map((r) => r[k]?.[key] ?? Number.NaN))
    const ratio = (a: string, b: string) =>
      median(rounds.map((r) => (r[a]?.rps ?? Number.NaN) / (r[b]?.rps ?? Number.NaN)))
    const summary = {
      medians: Object.fromEntries(
        kinds.map((k) => [
          k,
          {
            rps: med(k, 'rps'),
            p99: med(k, 'p99'),
            workerConnections: med(k, 'workerConnections'),
          },
        ]),
      ),
      citusServicePerPgbench: ratio('service on Citus', 'pgbench on Citus'),
      citusServicePerPlainService: ratio('service on Citus', 'service on PostgreSQL 15'),
      throughWorkersPerCoordinator: ratio('service through the workers', 'service on Citus'),
      shards: layout?.shards,
      cpuUsPerCreate: Object.fromEntries(
        (['service on Citus', 'service through the workers', 'pgbench on Citus'] as const).map(
          (k) => [
            k,
            Object.fromEntries(
              (['coordinatorUs', 'workersUs', 'clientUs'] as const).map((c) => [
                c,
                median(rounds.map((r) => r[k]?.[c] ?? Number.NaN)),
              ]),
            ),
          ],
        ),
      ),
    }
    say(
      `citus: the service on Citus ${summary.citusServicePerPgbench.toFixed(2)} × pgbench there (target 1.2), p99 ${summary.medians['service on Citus']?.p99.toFixed(1)} ms (target 50), ${summary.medians['service on Citus']?.workerConnections} new worker connections a run (target at most 20); ${summary.citusServicePerPlainService.toFixed(2)} × the service on plain PostgreSQL 15`,
    )
    const cpu = summary.cpuUsPerCreate['service on Citus'] as Cpu
    const viaWorkers = summary.cpuUsPerCreate['service through the workers'] as Cpu
    const pgCpu = summary.cpuUsPerCreate['pgbench on Citus'] as Cpu
    say(
      `citus: through the workers ${summary.throughWorkersPerCoordinator.toFixed(2)} × the service through the coordinator (target 1.3); CPU µs per create through the workers: coordinator ${viaWorkers.coordinatorUs.toFixed(1)} (target at most 2), workers ${viaWorkers.workersUs.toFixed(0)}, the two instances ${viaWorkers.clientUs.toFixed(0)}; p99 ${summary.medians['service through the workers']?.p99.toFixed(1)} ms`,
    )
    say(
      `citus: CPU µs per create (medians): service on Citus: coordinator ${cpu.coordinatorUs.toFixed(0)}, workers ${cpu.workersUs.toFixed(0)}, the service ${cpu.clientUs.toFixed(0)}; pgbench: coordinator ${pgCpu.coordinatorUs.toFixed(0)}, workers ${pgCpu.workersUs.toFixed(0)}`,
    )
    // Each node a machine of its own with as many cores as this one, the service's instances on
    // machines of their own, one per worker. Through the coordinator it plans every create, so
    // its cores are a limit however many workers there are; through the workers each create
    // costs only the worker that holds its row (its per-create CPU is both workers' together),
    // and the limits that grow instead are the instances' cores and the connections: every
    // instance keeps its statement slots on every worker, and 2 connections on the coordinator.
    const cores = os.availableParallelism()
    const coordinatorLimit = (cores * 1e6) / cpu.coordinatorUs
    const slots = limits.batch.maxInFlightPerWorker
    say(
      `citus: on paper, ${cores} cores a node (CPU-bound, from the medians), one instance per worker:`,
    )
    say(
      `citus: workers | through the coordinator: workers' limit  coordinator's limit  expected | through the workers: expected  instances' cores  connections per worker  on the coordinator`,
    )
    const projection = [2, 4, 8, 16].map((workers) => {
      const workersLimit = (workers * cores * 1e6) / cpu.workersUs
      const viaCoordinator = Math.min(workersLimit, coordinatorLimit)
      const throughWorkers = Math.min(
        (workers * cores * 1e6) / viaWorkers.workersUs,
        (cores * 1e6) / Math.max(viaWorkers.coordinatorUs, 1e-3),
      )
      const instanceCores = (throughWorkers * viaWorkers.clientUs) / 1e6
      const perWorker = workers * slots
      const onCoordinator = workers * 2
      say(
        `citus: ${f(workers, 7)} | ${f(workersLimit, 37)}  ${f(coordinatorLimit, 19)}  ${f(viaCoordinator, 8)} | ${f(throughWorkers, 29)}  ${f(instanceCores, 16, 1)}  ${f(perWorker, 22)}  ${f(onCoordinator, 18)}`,
      )
      return {
        workers,
        workersLimit,
        coordinatorLimit,
        viaCoordinator,
        throughWorkers,
        instanceCores,
        connectionsPerWorker: perWorker,
        connectionsOnCoordinator: onCoordinator,
      }
    })
    return { rounds, summary, projection }
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup()
  }
}
