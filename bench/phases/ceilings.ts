import { type Bench, f, type Measured, median, say } from '../bench.ts'
import { type Running, spawnFloor, spawnHttpCeiling, spawnService, stop } from '../processes.ts'

type Kind = { name: string; start?: () => Promise<Running>; batched?: boolean }
type Round = Record<string, Measured | { rps: number; p99: number; cpuUs: number; dbCpuUs: number }>

/**
 * At 64 connections, interleaved rounds with the order rotating: pgbench's single-row inserts
 * (the database's own ceiling), the service on this Node, the floor of its design (a minimal
 * coalescing server: node:http, the same driver and statement, nothing else), the service on
 * Node 24, with WORKERS=2, and a bare node:http server (the HTTP ceiling).
 */
export async function ceilingsPhase(bench: Bench, node24: string | undefined) {
  const { options, url, sql } = bench
  const kinds: Kind[] = [
    ...(options.havePgbench
      ? [{ name: 'pgbench' }, { name: 'pgbench 30-row', batched: true }]
      : []),
    { name: 'service', start: () => spawnService('service', url) },
    { name: 'floor', start: () => spawnFloor(url) },
    ...(node24
      ? [
          {
            name: 'service node 24',
            start: () => spawnService('service node 24', url, {}, { node: node24 }),
          },
        ]
      : []),
    {
      name: 'service 2 workers',
      start: () => spawnService('service 2 workers', url, { WORKERS: '2' }),
    },
    { name: 'HTTP ceiling', start: spawnHttpCeiling },
  ]
  say('')
  say(
    'ceilings at 64 connections (req/s or tx/s; p99 ms; CPU µs per request of the measured process)',
  )
  say(
    `round  ${kinds.map((k) => k.name.padStart(18)).join('  ')}   service/pgbench  service/floor  service/HTTP  node24/node20  2 workers/1`,
  )
  const rounds: Round[] = []
  for (let round = 1; round <= options.runs; round++) {
    const got: Round = {}
    // Rotate the order, so that no system always runs first or last.
    const order = kinds.map((_, i) => kinds[(i + round - 1) % kinds.length] as Kind)
    for (const kind of order) {
      await sql`truncate plants`
      if (kind.start === undefined) {
        // Single-row inserts from 64 clients; 30-row ones from 2, in rows per second.
        const p = await bench.measurePgbench(kind.batched ? 2 : 64, { batched: kind.batched })
        got[kind.name] = {
          rps: p.rowsPerSecond,
          p99: Number.NaN,
          cpuUs: Number.NaN,
          dbCpuUs: p.dbCpuUs,
          failed: p.failed,
        } as never
        continue
      }
      const target = await kind.start()
      got[kind.name] = await bench.measure(target, 64)
      await stop(target)
    }
    rounds.push(got)
    const rps = (name: string) => got[name]?.rps ?? Number.NaN
    say(
      `${f(round, 5)}  ${kinds.map((k) => `${f(rps(k.name), 7)} ${f(got[k.name]?.p99 ?? Number.NaN, 4, 1)} ${f(got[k.name]?.cpuUs ?? Number.NaN, 4, 0)}`.padStart(18)).join('  ')}   ${f(rps('service') / rps('pgbench'), 15, 2)}  ${f(rps('service') / rps('floor'), 13, 2)}  ${f(rps('service') / rps('HTTP ceiling'), 12, 2)}  ${f(rps('service node 24') / rps('service'), 13, 2)}  ${f(rps('service 2 workers') / rps('service'), 11, 2)}`,
    )
  }
  const med = (name: string, key: 'rps' | 'p99' | 'cpuUs' | 'dbCpuUs') =>
    median(rounds.map((r) => r[name]?.[key] ?? Number.NaN))
  const ratio = (a: string, b: string) =>
    median(rounds.map((r) => (r[a]?.rps ?? Number.NaN) / (r[b]?.rps ?? Number.NaN)))
  const summary = {
    medians: Object.fromEntries(
      kinds.map((k) => [
        k.name,
        {
          rps: med(k.name, 'rps'),
          p99: med(k.name, 'p99'),
          cpuUs: med(k.name, 'cpuUs'),
          dbCpuUs: med(k.name, 'dbCpuUs'),
        },
      ]),
    ),
    servicePerPgbench: ratio('service', 'pgbench'),
    servicePerFloor: ratio('service', 'floor'),
    floorPerPgbench: ratio('floor', 'pgbench'),
    servicePerHttpCeiling: ratio('service', 'HTTP ceiling'),
    node24PerNode20: ratio('service node 24', 'service'),
    twoWorkersPerOne: ratio('service 2 workers', 'service'),
    errors: rounds.reduce(
      (sum, r) => sum + Object.values(r).reduce((s, m) => s + ((m as Measured).errors ?? 0), 0),
      0,
    ),
    rowsOk: rounds.every((r) => Object.values(r).every((m) => (m as Measured).rowsOk !== false)),
  }
  say(
    `medians: ${kinds.map((k) => `${k.name} ${f(summary.medians[k.name]?.rps ?? Number.NaN, 0)}`).join(', ')}`,
  )
  say(
    `  service/pgbench ${summary.servicePerPgbench.toFixed(2)} (target 1.15), service/floor ${summary.servicePerFloor.toFixed(2)} (target 0.9), floor/pgbench ${summary.floorPerPgbench.toFixed(2)}, service/HTTP ceiling ${summary.servicePerHttpCeiling.toFixed(2)}, node 24/node 20 ${summary.node24PerNode20.toFixed(2)}, 2 workers/1 ${summary.twoWorkersPerOne.toFixed(2)}; service p99 ${summary.medians.service?.p99.toFixed(2)} ms (target 6), floor p99 ${summary.medians.floor?.p99.toFixed(2)} ms, CPU ${summary.medians.service?.cpuUs.toFixed(1)} µs/req; errors ${summary.errors}; every 200 a row: ${summary.rowsOk ? 'yes' : 'NO'}`,
  )
  say(
    `  PostgreSQL's CPU per row (µs, medians): ${['pgbench', 'service', 'floor'].map((k) => `${k} ${summary.medians[k]?.dbCpuUs.toFixed(1)}`).join(', ')}`,
  )
  const projection = project(
    summary.medians.service?.cpuUs ?? Number.NaN,
    summary.medians.service?.dbCpuUs ?? Number.NaN,
  )
  say(
    '  what WORKERS would give where PostgreSQL and the clients have cores of their own (CPU-bound, from the medians above):',
  )
  say('  WORKERS  service cores  creates/s  PostgreSQL cores it needs')
  for (const p of projection)
    say(`  ${f(p.workers, 7)}  ${f(p.workers, 13)}  ${f(p.rps, 9)}  ${f(p.databaseCores, 25, 1)}`)
  return { rounds, summary, projection }
}

/**
 * Throughput to expect with `WORKERS` = 1, 2, 4, 8, each worker on a core of its own, from the
 * CPU one create costs the service (`serviceUs`) and PostgreSQL (`databaseUs`, per row at the
 * service's batch sizes): the service's rate, and the cores PostgreSQL needs to keep up.
 */
function project(serviceUs: number, databaseUs: number) {
  return [1, 2, 4, 8].map((workers) => {
    const rps = (workers * 1e6) / serviceUs
    return { workers, rps, databaseCores: (rps * databaseUs) / 1e6 }
  })
}
