import { type Bench, f, median, say } from '../bench.ts'
import type { LevelSummary } from '../chart.ts'
import { batchRows, type Running, rssMb } from '../processes.ts'

type Level = LevelSummary & {
  run: number
  max: number
  errors: number
  rowsPerStatement: number
  rssMb: number
  rowsOk: boolean
}

/** Medians over the runs at each number of connections, for the report and the charts. */
function summarise(levels: readonly number[], rows: readonly Level[]) {
  return levels.map((connections) => {
    const at = rows.filter((r) => r.connections === connections)
    return {
      connections,
      serviceRps: median(at.map((r) => r.serviceRps)),
      ceilingRps: median(at.map((r) => r.ceilingRps)),
      ratio: median(at.map((r) => r.ratio)),
      p50: median(at.map((r) => r.p50)),
      p99: median(at.map((r) => r.p99)),
      max: median(at.map((r) => r.max)),
      errors: at.reduce((sum, r) => sum + r.errors, 0),
      rowsPerStatement: median(at.map((r) => r.rowsPerStatement)),
    }
  })
}

/** The service and pgbench at each number of connections, with rows per statement and peak RSS. */
export async function levelsPhase(bench: Bench, service: Running) {
  const { options, sql } = bench
  const pid = service.child.pid ?? 0
  const rows: Level[] = []
  say('')
  say(
    'run  conns  service req/s   p50 ms   p99 ms   max ms  errors  rows  | pgbench tx/s  | ratio  rows/stmt  peak RSS MB',
  )
  for (let run = 1; run <= options.runs; run++) {
    for (const connections of options.levels) {
      await sql`truncate plants`
      const before = await batchRows(service.base)
      const s = await bench.measure(service, connections)
      const after = await batchRows(service.base)
      const rss = rssMb(pid, 'VmHWM')
      await sql`truncate plants`
      const p = options.havePgbench ? await bench.measurePgbench(connections) : undefined
      const row = {
        run,
        connections,
        serviceRps: s.rps,
        ceilingRps: p?.tps ?? Number.NaN,
        ratio: s.rps / (p?.tps ?? Number.NaN),
        p50: s.p50,
        p99: s.p99,
        max: s.max,
        errors: s.errors,
        rowsPerStatement: (after.rows - before.rows) / (after.statements - before.statements),
        rssMb: rss,
        rowsOk: s.rowsOk,
      }
      rows.push(row)
      say(
        `${f(run, 3)}  ${f(connections, 5)}  ${f(row.serviceRps, 13)}  ${f(row.p50, 7, 2)}  ${f(row.p99, 7, 2)}  ${f(row.max, 7, 1)}  ${f(row.errors, 6)}  ${row.rowsOk ? ' yes' : '  NO'}  | ${f(row.ceilingRps, 12)}  | ${f(row.ratio, 5, 2)}  ${f(row.rowsPerStatement, 9, 1)}  ${f(rss, 11)}`,
      )
    }
  }
  const summary = summarise(options.levels, rows)
  say('medians over runs')
  say('conns  service req/s  p50 ms  p99 ms  max ms  pgbench tx/s  ratio  rows/statement')
  for (const m of summary)
    say(
      `${f(m.connections, 5)}  ${f(m.serviceRps, 13)}  ${f(m.p50, 6, 2)}  ${f(m.p99, 6, 2)}  ${f(m.max, 6, 1)}  ${f(m.ceilingRps, 12)}  ${f(m.ratio, 5, 2)}  ${f(m.rowsPerStatement, 14, 1)}`,
    )
  return { rows, summary }
}
