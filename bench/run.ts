// npm run bench [-- --runs 3 --seconds 10 --warmup 3 --soak 60 --levels 16,64,256]
// Starts the service against DATABASE_URL (or an embedded PostgreSQL in a temporary folder),
// measures POST /plants at each level side by side with the driver-level single-insert ceiling
// (and reads the rows per insert statement from the service's /metrics), then the cost of
// metrics and trace context at 64 connections (a second service with METRICS=off and
// TRACE_CONTEXT=off, interleaved), then a long run at 64 connections; prints the figures and
// writes JSON and SVG charts to bench-results/.
import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import { createToken } from '../src/auth/token-repository.ts'
import { freePort, startEmbedded } from '../src/db/embedded.ts'
import { migrate } from '../src/db/migrate.ts'
import { createLog } from '../src/log.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from '../test/helpers/pgbouncer.ts'
import { runCeiling } from './ceiling.ts'
import { renderBatchChart, renderChart } from './chart.ts'
import { type LoadResult, quantile, runLoad } from './load.ts'

const root = fileURLToPath(new URL('..', import.meta.url))
const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    soak: { type: 'string', default: '60' },
    levels: { type: 'string', default: '16,64,256' },
    // Which parts to run: levels, observability, pgbouncer, soak.
    only: { type: 'string', default: 'levels,observability,pgbouncer,soak' },
  },
})
const parts = new Set(args.only.split(','))
const runs = Number(args.runs)
const seconds = Number(args.seconds)
const warmup = Number(args.warmup)
const soakSeconds = Number(args.soak)
const levels = args.levels.split(',').map(Number)
const log = createLog('warn', (l) => process.stderr.write(l))
const say = (line: string) => process.stdout.write(`${line}\n`)

type Figures = { rps: number; p50: number; p99: number; max: number; errors: number }
function figures(r: LoadResult): Figures {
  return {
    rps: r.ok / r.seconds,
    p50: quantile(r.latencies, 0.5),
    p99: quantile(r.latencies, 0.99),
    max: quantile(r.latencies, 1),
    errors: r.errors,
  }
}
const median = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN

/** CPU seconds (user and system) a process has used: /proc/PID/stat, in clock ticks of 10 ms. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN) / 1024
}

async function startServiceProcess(
  url: string,
  settings: Record<string, string> = {},
): Promise<{ child: ChildProcess; base: string }> {
  const port = await freePort()
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: url, PORT: String(port), LOG_LEVEL: 'info', ...settings },
    // The request log is written as in production, to a sink that costs nothing to read.
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const base = `http://127.0.0.1:${port}`
  for (let i = 0; i < 200; i++) {
    const ready = await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    )
    if (ready) return { child, base }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error('the service did not become ready')
}

/** Rows and statements so far, from the service's plant_store_create_batch_rows histogram. */
async function batchRows(base: string): Promise<{ rows: number; statements: number }> {
  const text = await (await fetch(`${base}/metrics`)).text()
  const value = (name: string) =>
    Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN)
  return {
    rows: value('plant_store_create_batch_rows_sum'),
    statements: value('plant_store_create_batch_rows_count'),
  }
}

// The database: DATABASE_URL, or an embedded PostgreSQL that allows 256 driver connections.
let stopDatabase = async () => {}
let url = process.env.DATABASE_URL
let databaseKind = 'DATABASE_URL'
if (!url) {
  const dir = await mkdtemp(join(tmpdir(), 'plant-store-bench-'))
  await chmod(dir, 0o755)
  const db = await startEmbedded({
    dir,
    log,
    shareRunning: false,
    settings: { max_connections: '400' },
  })
  url = db.url
  databaseKind = 'embedded PostgreSQL 18 (fsync on)'
  stopDatabase = async () => {
    await db.stop()
    await rm(dir, { recursive: true, force: true })
  }
}
await migrate(url, log)
const sql = postgres(url, { max: 2, onnotice: () => {} })
const created = await createToken(sql, `bench-${Date.now()}`)
if (!('token' in created)) throw new Error(created.problem)
const token = created.token
const service = await startServiceProcess(url)
const pid = service.child.pid ?? 0
let nextId = 1n

say(
  `plant store benchmark: ${runs} run(s), ${warmup} s warm-up + ${seconds} s per phase, levels ${levels.join(', ')}`,
)
say(
  `machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${Math.round(totalmem() / 2 ** 30)} GiB; node ${process.version}; database: ${databaseKind}`,
)
say('')
say(
  'run  conns  service req/s   p50 ms   p99 ms   max ms  errors  rows=200s  | ceiling ins/s   p50 ms   p99 ms  | ratio   peak RSS MB',
)

type Row = {
  run: number
  connections: number
  service: Figures
  ceiling: Figures
  ratio: number
  rowsMatch: boolean
  rssMb: number
  rowsPerStatement: number
}
const rows: Row[] = []
for (let run = 1; run <= runs && parts.has('levels'); run++) {
  for (const connections of levels) {
    await sql`truncate plants`
    const first = nextId
    const batchesBefore = await batchRows(service.base)
    const s = await runLoad({
      base: service.base,
      token: created.token,
      connections,
      warmupSeconds: warmup,
      seconds,
      firstId: nextId,
    })
    nextId = s.nextId
    const batchesAfter = await batchRows(service.base)
    const rowsPerStatement =
      (batchesAfter.rows - batchesBefore.rows) /
      (batchesAfter.statements - batchesBefore.statements)
    const [{ count }] =
      (await sql`select count(*)::int as count from plants where id >= ${String(first)}::int8`) as unknown as [
        { count: number },
      ]
    const acknowledged = s.totalOk
    const rssMb = peakRssMb(pid)
    await sql`truncate plants`
    const c = await runCeiling({
      url,
      connections,
      warmupSeconds: warmup,
      seconds,
      firstId: nextId,
    })
    nextId = c.nextId
    const row: Row = {
      run,
      connections,
      service: figures(s),
      ceiling: figures(c),
      ratio: s.ok / s.seconds / (c.ok / c.seconds),
      rowsMatch: count === acknowledged,
      rssMb,
      rowsPerStatement,
    }
    rows.push(row)
    const f = (n: number, w: number, d = 1) => n.toFixed(d).padStart(w)
    say(
      `${String(run).padStart(3)}  ${String(connections).padStart(5)}  ${f(row.service.rps, 13, 0)}  ${f(row.service.p50, 7, 2)}  ${f(row.service.p99, 7, 2)}  ${f(row.service.max, 7, 1)}  ${String(row.service.errors).padStart(6)}  ${row.rowsMatch ? `yes ${count}` : `NO ${count}/${acknowledged}`}  | ${f(row.ceiling.rps, 13, 0)}  ${f(row.ceiling.p50, 7, 2)}  ${f(row.ceiling.p99, 7, 2)}  | ${f(row.ratio, 5, 2)}  ${f(rssMb, 8, 0)}`,
    )
  }
}

type Observed = Figures & { cpuUs: number }
type Service = { child: ChildProcess; base: string }

/**
 * The same load at 64 connections against two services, interleaved (which goes first
 * alternates), `runs` rounds: throughput, p99 and CPU per request (the whole phase, warm-up
 * included, from /proc) of each, and their ratios.
 */
async function compare(title: string, names: [string, string], services: [Service, Service]) {
  const [a, b] = names
  say('')
  say(title)
  say(
    `run  ${`${a} req/s`.padStart(12)}  ${`${a} p99 ms`.padStart(12)}  ${`${a} CPU µs/req`.padStart(16)}  |  ${`${b} req/s`.padStart(12)}  ${`${b} p99 ms`.padStart(12)}  ${`${b} CPU µs/req`.padStart(16)}  |  req/s ratio  CPU ratio`,
  )
  const rounds: [Observed, Observed][] = []
  for (let run = 1; run <= runs; run++) {
    const pair: Observed[] = []
    for (const index of run % 2 === 1 ? [0, 1] : [1, 0]) {
      await sql`truncate plants`
      const target = services[index] as Service
      const cpuBefore = cpuSeconds(target.child.pid ?? 0)
      const r = await runLoad({
        base: target.base,
        token,
        connections: 64,
        warmupSeconds: warmup,
        seconds,
        firstId: nextId,
      })
      nextId = r.nextId
      const cpuUs = ((cpuSeconds(target.child.pid ?? 0) - cpuBefore) * 1e6) / (r.totalOk + r.errors)
      pair[index] = { ...figures(r), cpuUs }
    }
    const [x, y] = pair as [Observed, Observed]
    rounds.push([x, y])
    say(
      `${String(run).padStart(3)}  ${x.rps.toFixed(0).padStart(12)}  ${x.p99.toFixed(2).padStart(12)}  ${x.cpuUs.toFixed(1).padStart(16)}  |  ${y.rps.toFixed(0).padStart(12)}  ${y.p99.toFixed(2).padStart(12)}  ${y.cpuUs.toFixed(1).padStart(16)}  |  ${(x.rps / y.rps).toFixed(3).padStart(11)}  ${(x.cpuUs / y.cpuUs).toFixed(3).padStart(9)}`,
    )
  }
  const m = {
    [`${a}Rps`]: median(rounds.map(([x]) => x.rps)),
    [`${b}Rps`]: median(rounds.map(([, y]) => y.rps)),
    [`${a}P99`]: median(rounds.map(([x]) => x.p99)),
    [`${b}P99`]: median(rounds.map(([, y]) => y.p99)),
    [`${a}CpuUs`]: median(rounds.map(([x]) => x.cpuUs)),
    [`${b}CpuUs`]: median(rounds.map(([, y]) => y.cpuUs)),
    ratio: median(rounds.map(([x, y]) => x.rps / y.rps)),
    cpuRatio: median(rounds.map(([x, y]) => x.cpuUs / y.cpuUs)),
    errors: rounds.reduce((sum, [x, y]) => sum + x.errors + y.errors, 0),
  }
  say(
    `medians: ${a} ${m[`${a}Rps`]?.toFixed(0)} req/s, p99 ${m[`${a}P99`]?.toFixed(2)} ms; ${b} ${m[`${b}Rps`]?.toFixed(0)} req/s, p99 ${m[`${b}P99`]?.toFixed(2)} ms; ${a}/${b} throughput ${m.ratio?.toFixed(3)}, CPU per request ${m.cpuRatio?.toFixed(3)}; errors ${m.errors}`,
  )
  for (const done of services) {
    done.child.kill('SIGTERM')
    await new Promise((r) => done.child.on('exit', r))
  }
  return m
}

// The cost of metrics and trace context: two new services, one with both off. Both are new
// because the driver's CPU per statement grows with the statements a process has served.
const observability = parts.has('observability')
  ? await compare(
      'metrics and trace context at 64 connections: on (the default) against off',
      ['on', 'off'],
      [
        await startServiceProcess(url),
        await startServiceProcess(url, { METRICS: 'off', TRACE_CONTEXT: 'off' }),
      ],
    )
  : undefined

// Through PgBouncer in transaction mode against straight to PostgreSQL.
let pgbouncer: Record<string, number> | string | undefined
if (parts.has('pgbouncer') && !pgbouncerPresent) {
  pgbouncer = `no PgBouncer at ${pgbouncerPath} (apt-get install pgbouncer)`
  say('')
  say(`pgbouncer: skipped, ${pgbouncer}`)
} else if (parts.has('pgbouncer')) {
  const cleanups: (() => unknown)[] = []
  const bouncer = await startPgBouncer(
    url,
    { after: (fn) => void cleanups.push(fn) },
    { poolSize: 8 },
  )
  // Through the pooler the service sends no statement_timeout; the database carries it.
  await sql.unsafe(`alter database ${new URL(url).pathname.slice(1)} set statement_timeout = '5s'`)
  pgbouncer = await compare(
    'through PgBouncer 1.18 in transaction mode (pool of 8) against straight to PostgreSQL, 64 connections',
    ['pgbouncer', 'direct'],
    [
      await startServiceProcess(bouncer.url, {
        DATABASE_POOL_MODE: 'transaction',
        DATABASE_DIRECT_URL: url,
      }),
      await startServiceProcess(url),
    ],
  )
  for (const cleanup of cleanups.reverse()) await cleanup()
}

// The long run: no slow-down over time.
const soaks: { first: number; last: number; ratio: number }[] = []
for (let run = 1; run <= runs && soakSeconds > 0 && parts.has('soak'); run++) {
  await sql`truncate plants`
  const s = await runLoad({
    base: service.base,
    token: created.token,
    connections: 64,
    warmupSeconds: warmup,
    seconds: soakSeconds,
    firstId: nextId,
  })
  nextId = s.nextId
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0)
  const first = sum(s.perSecond.slice(0, 10)) / 10
  const last = sum(s.perSecond.slice(-10)) / 10
  soaks.push({ first, last, ratio: last / first })
  say(
    `soak ${run}: ${soakSeconds} s at 64 connections: first 10 s ${first.toFixed(0)} req/s, last 10 s ${last.toFixed(0)} req/s (${(last / first).toFixed(2)}x), errors ${s.errors}`,
  )
}
const finalRss = peakRssMb(pid)

say('')
if (parts.has('levels')) {
  say('medians over runs')
  say('conns  service req/s  p50 ms  p99 ms  max ms  ceiling ins/s  ratio  rows/statement')
}
const summary = levels.map((connections) => {
  const at = rows.filter((r) => r.connections === connections)
  const m = {
    connections,
    serviceRps: median(at.map((r) => r.service.rps)),
    p50: median(at.map((r) => r.service.p50)),
    p99: median(at.map((r) => r.service.p99)),
    max: median(at.map((r) => r.service.max)),
    ceilingRps: median(at.map((r) => r.ceiling.rps)),
    ratio: median(at.map((r) => r.ratio)),
    errors: at.reduce((a, r) => a + r.service.errors, 0),
    rowsPerStatement: median(at.map((r) => r.rowsPerStatement)),
  }
  if (parts.has('levels'))
    say(
      `${String(connections).padStart(5)}  ${m.serviceRps.toFixed(0).padStart(13)}  ${m.p50.toFixed(2).padStart(6)}  ${m.p99.toFixed(2).padStart(6)}  ${m.max.toFixed(1).padStart(6)}  ${m.ceilingRps.toFixed(0).padStart(13)}  ${m.ratio.toFixed(2).padStart(5)}  ${m.rowsPerStatement.toFixed(1).padStart(14)}`,
    )
  return m
})
const soakRatio = median(soaks.map((s) => s.ratio))
if (parts.has('levels') || parts.has('soak'))
  say(
    `soak: last/first 10 s median ${soakRatio.toFixed(2)}; peak RSS of the service ${finalRss.toFixed(0)} MB; all rows match the 200s: ${rows.every((r) => r.rowsMatch) ? 'yes' : 'NO'}`,
  )

const outDir = join(root, 'bench-results')
await mkdir(outDir, { recursive: true })
const stamp = new Date().toISOString().replace(/[:.]/g, '-')
const result = {
  when: new Date().toISOString(),
  databaseKind,
  runs,
  seconds,
  warmup,
  levels,
  rows,
  summary,
  soaks,
  observability,
  pgbouncer,
  peakRssMb: finalRss,
}
await writeFile(join(outDir, `bench-${stamp}.json`), `${JSON.stringify(result, null, 2)}\n`)
if (parts.has('levels')) {
  await writeFile(join(outDir, `bench-${stamp}.svg`), renderChart(summary, soakRatio, finalRss))
  await writeFile(join(outDir, 'latest.svg'), renderChart(summary, soakRatio, finalRss))
  await writeFile(join(outDir, 'batch-rows.svg'), renderBatchChart(summary))
}
say(`results: bench-results/bench-${stamp}.json and charts in bench-results/`)

service.child.kill('SIGTERM')
await new Promise((r) => service.child.on('exit', r))
await sql.end({ timeout: 5 })
await stopDatabase()
