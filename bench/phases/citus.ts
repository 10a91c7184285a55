import postgres, { type Sql } from 'postgres'
import { createToken } from '../../src/auth/token-repository.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createLog } from '../../src/log.ts'
import { isFailure } from '../../src/outcome.ts'
import { citusUnavailable, startCitusCluster, startPostgres15 } from '../../test/helpers/citus.ts'
import { type Bench, f, median, say } from '../bench.ts'
import { runPgbench } from '../pgbench.ts'
import { spawnService, stop } from '../processes.ts'

type Round = Record<string, { rps: number; p99: number; workerConnections: number }>

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
export async function citusPhase(bench: Bench) {
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
    const plainSql = postgres(plain.url, { max: 1, onnotice: () => {} })
    cleanups.push(() => plainSql.end())
    const kinds = ['service on Citus', 'pgbench on Citus', 'service on PostgreSQL 15'] as const
    say('')
    say(
      `citus: a coordinator and two workers (PostgreSQL 15, Citus 13.2.2, fsync on) and a plain PostgreSQL 15 on this machine; 64 connections, ids at random, ${options.warmup} s warm-up + ${options.seconds} s`,
    )
    say(
      `round  ${kinds.map((k) => k.padStart(26)).join('  ')}   (req/s or tx/s, p99 ms, new worker connections)`,
    )
    const rounds: Round[] = []
    for (let round = 1; round <= options.runs; round++) {
      const got: Round = {}
      const order = kinds.map((_, i) => kinds[(i + round - 1) % kinds.length] as string)
      for (const kind of order) {
        const onCitus = kind.endsWith('Citus')
        const sql = onCitus ? cluster.sql : plainSql
        await sql`truncate plants`
        if (kind === 'pgbench on Citus') {
          await runPgbench({
            url: cluster.coordinator.url,
            connections: 64,
            seconds: options.warmup,
          })
          const before = await workerConnections(cluster.sql)
          const p = await runPgbench({
            url: cluster.coordinator.url,
            connections: 64,
            seconds: options.seconds,
          })
          got[kind] = {
            rps: p.tps,
            p99: Number.NaN,
            workerConnections: (await workerConnections(cluster.sql)) - before,
          }
          continue
        }
        const url = onCitus ? cluster.coordinator.url : plain.url
        const service = await spawnService(kind, url)
        try {
          const token = tokens[onCitus ? 'citus' : 'plain'] ?? ''
          await bench.load(service, 64, options.warmup, { randomIds: true, token })
          const before = onCitus ? await workerConnections(cluster.sql) : 0
          const r = await bench.load(service, 64, options.seconds, { randomIds: true, token })
          got[kind] = {
            rps: r.rps,
            p99: r.p99,
            workerConnections: onCitus ? (await workerConnections(cluster.sql)) - before : 0,
          }
          if (r.errors > 0) say(`  ${kind}: ${r.errors} errors`)
        } finally {
          await stop(service)
        }
      }
      rounds.push(got)
      say(
        `${f(round, 5)}  ${kinds.map((k) => `${f(got[k]?.rps ?? Number.NaN, 8)} ${f(got[k]?.p99 ?? Number.NaN, 6, 1)} ${f(got[k]?.workerConnections ?? Number.NaN, 6)}`.padStart(26)).join('  ')}`,
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
    }
    say(
      `citus: the service on Citus ${summary.citusServicePerPgbench.toFixed(2)} × pgbench there (target 1.2), p99 ${summary.medians['service on Citus']?.p99.toFixed(1)} ms (target 50), ${summary.medians['service on Citus']?.workerConnections} new worker connections a run (target at most 20); ${summary.citusServicePerPlainService.toFixed(2)} × the service on plain PostgreSQL 15`,
    )
    return { rounds, summary }
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup()
  }
}
