import { type Bench, f, say } from '../bench.ts'
import { runPgbench } from '../pgbench.ts'
import { batchRows, spawnService, stop } from '../processes.ts'

/** One measured run of the growth part. */
type GrowthRun = {
  table: string
  /** `service, next`: the run that follows the service's first, with no checkpoint between. */
  system: 'service' | 'service, next' | 'pgbench'
  rps: number
  p99: number
  rowsPerStatement: number
  walBytesPerRow: number
  /** PostgreSQL's CPU per row, µs (all its processes). */
  dbCpuUsPerRow: number
  errors: number
}

/** WAL written since `from` (an LSN), in bytes, and the current LSN. */
async function walSince(bench: Bench, from: string): Promise<{ bytes: number; lsn: string }> {
  const [row] = await bench.sql<{ bytes: string; lsn: string }[]>`
    select pg_wal_lsn_diff(pg_current_wal_lsn(), ${from}::pg_lsn)::bigint::text as bytes,
      pg_current_wal_lsn()::text as lsn`
  return { bytes: Number(row?.bytes), lsn: row?.lsn ?? from }
}

async function currentLsn(bench: Bench): Promise<string> {
  const [row] = await bench.sql<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`
  return row?.lsn ?? '0/0'
}

/**
 * Fills plants to `rows` rows with ids at random over the int64 range, in SQL, a million at a
 * time (the service's own path would take hours).
 */
async function fill(bench: Bench, rows: number): Promise<void> {
  const started = performance.now()
  let have = Number(
    (await bench.sql<{ n: string }[]>`select count(*)::text as n from plants`)[0]?.n,
  )
  while (have < rows) {
    const chunk = Math.min(1_000_000, rows - have)
    const result = await bench.sql`
      insert into plants (id, name, tag, created_by)
      select (random() * 1.8e19 - 9.0e18)::int8, 'growth plant', 'growth', 'bench fill'
      from generate_series(1, ${chunk})
      on conflict (id) do nothing`
    have += result.count
    say(`  filled ${f(have, 11)} rows in ${((performance.now() - started) / 1000).toFixed(0)} s`)
  }
  await bench.sql`vacuum analyze plants`
}

/**
 * The service and pgbench on an empty table and on one of `rows` random ids, side by side, ids at
 * random for both, a checkpoint before each run (the worst case for WAL: every page's first
 * change is a full-page image), and the service once more straight after (the pages it touched
 * are then written whole no more): req/s, p99, rows per statement, WAL bytes and PostgreSQL's
 * CPU per row.
 */
export async function growthPhase(bench: Bench, rows: number) {
  const { options, sql, url } = bench
  const service = await spawnService('service', url)
  const runs: GrowthRun[] = []
  say('')
  say(
    `growth: ids at random, 64 connections, ${options.seconds} s runs after a checkpoint; the table empty, then at ${rows.toLocaleString('en')} rows`,
  )
  say('table         system            req/s   p99 ms  rows/stmt  WAL B/row  PG CPU µs/row  errors')
  try {
    await sql`truncate plants`
    await bench.load(service, 64, options.warmup, { randomIds: true })
    for (const table of ['empty', `${rows.toLocaleString('en')} rows`]) {
      if (table === 'empty') await sql`truncate plants`
      else await fill(bench, rows)
      // The service: right after a checkpoint (the worst case), then the next run without one.
      for (const system of ['service', 'service, next'] as const) {
        if (system === 'service') await sql`checkpoint`
        const before = await batchRows(service.base)
        const lsn = await currentLsn(bench)
        const dbCpu = await bench.databaseCpuSeconds()
        const r = await bench.load(service, 64, options.seconds, { randomIds: true })
        const dbCpuAfter = await bench.databaseCpuSeconds()
        const wal = await walSince(bench, lsn)
        const after = await batchRows(service.base)
        const inserted = after.rows - before.rows
        runs.push({
          table,
          system,
          rps: r.rps,
          p99: r.p99,
          rowsPerStatement: inserted / (after.statements - before.statements),
          walBytesPerRow: wal.bytes / inserted,
          dbCpuUsPerRow: ((dbCpuAfter - dbCpu) * 1e6) / inserted,
          errors: r.errors,
        })
      }
      // pgbench, single-row inserts with random ids.
      if (options.havePgbench) {
        await sql`checkpoint`
        const lsn2 = await currentLsn(bench)
        const dbCpu2 = await bench.databaseCpuSeconds()
        const p = await runPgbench({ url, connections: 64, seconds: options.seconds })
        const dbCpuAfter2 = await bench.databaseCpuSeconds()
        const wal2 = await walSince(bench, lsn2)
        runs.push({
          table,
          system: 'pgbench',
          rps: p.tps,
          p99: Number.NaN,
          rowsPerStatement: 1,
          walBytesPerRow: wal2.bytes / p.transactions,
          dbCpuUsPerRow: ((dbCpuAfter2 - dbCpu2) * 1e6) / p.transactions,
          errors: p.failed,
        })
      }
      for (const run of runs.filter((x) => x.table === table))
        say(
          `${table.padEnd(12)}  ${run.system.padEnd(13)}  ${f(run.rps, 9)}  ${f(run.p99, 7, 2)}  ${f(run.rowsPerStatement, 9, 1)}  ${f(run.walBytesPerRow, 9)}  ${f(run.dbCpuUsPerRow, 13, 1)}  ${f(run.errors, 6)}`,
        )
    }
  } finally {
    await stop(service)
  }
  const of = (table: string, system: string) =>
    runs.find((x) => x.table === table && x.system === system)
  const grown = `${rows.toLocaleString('en')} rows`
  const summary = {
    serviceAtRowsPerEmpty:
      (of(grown, 'service')?.rps ?? Number.NaN) / (of('empty', 'service')?.rps ?? Number.NaN),
    pgbenchAtRowsPerEmpty:
      (of(grown, 'pgbench')?.rps ?? Number.NaN) / (of('empty', 'pgbench')?.rps ?? Number.NaN),
    serviceWalBytesPerRowAtRows: of(grown, 'service')?.walBytesPerRow ?? Number.NaN,
    serviceNextAtRowsPerEmpty:
      (of(grown, 'service, next')?.rps ?? Number.NaN) /
      (of('empty', 'service, next')?.rps ?? Number.NaN),
    serviceNextWalBytesPerRowAtRows: of(grown, 'service, next')?.walBytesPerRow ?? Number.NaN,
  }
  say(
    `growth: the service at ${grown} keeps ${summary.serviceAtRowsPerEmpty.toFixed(2)} of its empty-table rate (pgbench ${summary.pgbenchAtRowsPerEmpty.toFixed(2)}), writing ${summary.serviceWalBytesPerRowAtRows.toFixed(0)} WAL bytes per row after a checkpoint; the next run ${summary.serviceNextAtRowsPerEmpty.toFixed(2)} and ${summary.serviceNextWalBytesPerRowAtRows.toFixed(0)} bytes`,
  )
  return { rows, runs, summary }
}
