// npm run bench [-- --runs 3 --seconds 10 --warmup 3 --flat 60 --soak 0 --levels 16,64,256
//                  --only ceilings,levels,observability,pgbouncer,flat]
// Starts PostgreSQL (DATABASE_URL, or an embedded one in a temporary folder) and measures, with
// wrk as the load generator (2 threads, keep-alive, one request in flight per connection):
// - ceilings: at 64 connections, interleaved rounds of pgbench single-row inserts (the
//   database's own ceiling), the service on this Node, on Node 24, with WORKERS=2, and a bare
//   node:http server (the HTTP ceiling);
// - levels: the service and pgbench at 16, 64 and 256 connections, with rows per statement and
//   the service's peak RSS;
// - observability, pgbouncer: two services side by side (metrics and trace context on/off;
//   through PgBouncer or not);
// - flat: a 60 s run in 10 s slices, last against first;
// - soak (--soak N): runs until the service has sent N insert statements, a minute at a time,
//   and compares the first minute with the last (throughput, CPU per request, RSS).
// Prints the figures and writes JSON and SVG charts to bench-results/.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
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
import { isFailure } from '../src/outcome.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from '../test/helpers/pgbouncer.ts'
import { renderBatchChart, renderChart } from './chart.ts'
import { pgbenchPath, pgbenchVersion, runPgbench } from './pgbench.ts'
import { idsAfter, runWrk, type WrkResult, wrkPath } from './wrk.ts'

const root = fileURLToPath(new URL('..', import.meta.url))
const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    flat: { type: 'string', default: '60' },
    soak: { type: 'string', default: '0' },
    'soak-connections': { type: 'string', default: '8' },
    levels: { type: 'string', default: '16,64,256' },
    only: { type: 'string', default: 'ceilings,levels,observability,pgbouncer,flat' },
    node24: { type: 'string', default: '24.21.0' },
  },
})
const parts = new Set(args.only.split(','))
const runs = Number(args.runs)
const seconds = Number(args.seconds)
const warmup = Number(args.warmup)
const flatSeconds = Number(args.flat)
const soakStatements = Number(args.soak)
const soakConnections = Number(args['soak-connections'])
const levels = args.levels.split(',').map(Number)
const log = createLog('warn', (l) => process.stderr.write(l))
const say = (line: string) => process.stdout.write(`${line}\n`)
const median = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN
const f = (n: number, w: number, d = 0) => n.toFixed(d).padStart(w)

if (wrkPath() === undefined) {
  say('bench: wrk not found; install it (Debian: apt-get install wrk)')
  process.exit(1)
}
const havePgbench = pgbenchPath() !== undefined
if (!havePgbench)
  say('bench: pgbench not found (Debian: apt-get install postgresql-client); no pgbench comparison')

/** CPU seconds (user and system) of a process and its children (cluster workers). */
function cpuSeconds(pid: number): number {
  const own = (p: number) => {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      return (Number(fields[11]) + Number(fields[12])) / 100
    } catch {
      return 0
    }
  }
  return own(pid) + children(pid).reduce((sum, c) => sum + own(c), 0)
}

function children(pid: number): number[] {
  const file = `/proc/${pid}/task/${pid}/children`
  return existsSync(file)
    ? readFileSync(file, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
    : []
}

function rssMb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN) / 1024
}

type Running = { child: ChildProcess; base: string; name: string }

/** The service as its own process: `node --import tsx src/main.ts`, its log to /dev/null. */
async function startService(
  name: string,
  url: string,
  settings: Record<string, string> = {},
  node = process.execPath,
): Promise<Running> {
  const port = await freePort()
  const child = spawn(node, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: url, PORT: String(port), LOG_LEVEL: 'info', ...settings },
    // The request log is written as in production, to a sink that costs nothing to read.
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const base = `http://127.0.0.1:${port}`
  for (let i = 0; i < 300; i++) {
    const ready = await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    )
    if (ready) return { child, base, name }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`${name} did not become ready`)
}

/** The bare node:http server of bench/http-ceiling.ts. */
async function startHttpCeiling(): Promise<Running> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/http-ceiling.ts'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const port = await new Promise<string>((resolve) =>
    child.stdout?.once('data', (c: Buffer) => resolve(c.toString().trim())),
  )
  return { child, base: `http://127.0.0.1:${port}`, name: 'HTTP ceiling' }
}

async function stop(r: Running): Promise<void> {
  if (r.child.exitCode !== null) return
  r.child.kill('SIGTERM')
  await new Promise((resolve) => r.child.on('exit', resolve))
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

// The database: DATABASE_URL, or an embedded PostgreSQL that allows 256 clients twice over.
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
    settings: { max_connections: '600' },
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
if (isFailure(created)) throw new Error(created.message)
const token = created
let nextId = 1n

/** One measured wrk run after a warm-up, with the CPU the target spent per request. */
type Measured = WrkResult & { cpuUs: number; rowsOk: boolean }
async function measure(target: Running, connections: number): Promise<Measured> {
  const pid = target.child.pid ?? 0
  const warm = await runWrk({
    url: target.base,
    token,
    connections,
    seconds: warmup,
    firstId: nextId,
  })
  nextId = idsAfter(nextId, warm, connections)
  const first = nextId
  const cpuBefore = cpuSeconds(pid)
  const r = await runWrk({ url: target.base, token, connections, seconds, firstId: nextId })
  const cpuUs = ((cpuSeconds(pid) - cpuBefore) * 1e6) / r.requests
  nextId = idsAfter(nextId, r, connections)
  // Every 200 is a row: at least as many rows as answers (wrk may stop with requests unread).
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from plants where id >= ${String(first)}::int8 and id < ${String(nextId)}::int8`
  const rowsOk = target.name === 'HTTP ceiling' || (row?.n ?? 0) >= r.requests - r.errors
  return { ...r, cpuUs, rowsOk }
}

async function measurePgbench(connections: number) {
  await runPgbench({ url: url as string, connections, seconds: warmup })
  return runPgbench({ url: url as string, connections, seconds })
}

const node24 = (() => {
  const found = spawnSync('bash', ['.ci/node-lts.sh', args.node24], { cwd: root, encoding: 'utf8' })
  const dir = found.stdout.trim()
  return found.status === 0 && existsSync(`${dir}/node`) ? `${dir}/node` : undefined
})()

say(
  `plant store benchmark: ${runs} round(s), ${warmup} s warm-up + ${seconds} s per phase; load from wrk (2 threads)`,
)
say(
  `machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${Math.round(totalmem() / 2 ** 30)} GiB; node ${process.version}${node24 ? `, node 24 at ${node24}` : ', no node 24'}; database: ${databaseKind}; ${havePgbench ? pgbenchVersion() : 'no pgbench'}`,
)
const results: Record<string, unknown> = { when: new Date().toISOString(), databaseKind, runs }

// ---- ceilings: the service against pgbench and a bare node:http server, 64 connections ----
if (parts.has('ceilings')) {
  type Kind = { name: string; start?: () => Promise<Running> }
  const kinds: Kind[] = [
    ...(havePgbench ? [{ name: 'pgbench' }] : []),
    { name: 'service', start: () => startService('service', url as string) },
    ...(node24
      ? [
          {
            name: 'service node 24',
            start: () => startService('service node 24', url as string, {}, node24),
          },
        ]
      : []),
    {
      name: 'service 2 workers',
      start: () => startService('service 2 workers', url as string, { WORKERS: '2' }),
    },
    { name: 'HTTP ceiling', start: startHttpCeiling },
  ]
  say('')
  say(
    'ceilings at 64 connections (req/s or tx/s; p99 ms; CPU µs per request of the measured process)',
  )
  say(
    `round  ${kinds.map((k) => k.name.padStart(18)).join('  ')}   service/pgbench  service/HTTP  node24/node20  2 workers/1`,
  )
  const rounds: Record<string, Measured | { rps: number; p99: number; cpuUs: number }>[] = []
  for (let round = 1; round <= runs; round++) {
    const got: (typeof rounds)[number] = {}
    // Rotate the order, so that no system always runs first or last.
    const order = kinds.map((_, i) => kinds[(i + round - 1) % kinds.length] as Kind)
    for (const kind of order) {
      await sql`truncate plants`
      if (kind.start === undefined) {
        const p = await measurePgbench(64)
        got[kind.name] = {
          rps: p.tps,
          p99: Number.NaN,
          cpuUs: Number.NaN,
          failed: p.failed,
        } as never
        continue
      }
      const target = await kind.start()
      got[kind.name] = await measure(target, 64)
      await stop(target)
    }
    rounds.push(got)
    const rps = (name: string) => got[name]?.rps ?? Number.NaN
    say(
      `${f(round, 5)}  ${kinds.map((k) => `${f(rps(k.name), 7)} ${f(got[k.name]?.p99 ?? Number.NaN, 4, 1)} ${f(got[k.name]?.cpuUs ?? Number.NaN, 4, 0)}`.padStart(18)).join('  ')}   ${f(rps('service') / rps('pgbench'), 15, 2)}  ${f(rps('service') / rps('HTTP ceiling'), 12, 2)}  ${f(rps('service node 24') / rps('service'), 13, 2)}  ${f(rps('service 2 workers') / rps('service'), 11, 2)}`,
    )
  }
  const med = (name: string, key: 'rps' | 'p99' | 'cpuUs') =>
    median(rounds.map((r) => r[name]?.[key] ?? Number.NaN))
  const ratio = (a: string, b: string) =>
    median(rounds.map((r) => (r[a]?.rps ?? Number.NaN) / (r[b]?.rps ?? Number.NaN)))
  const summary = {
    medians: Object.fromEntries(
      kinds.map((k) => [
        k.name,
        { rps: med(k.name, 'rps'), p99: med(k.name, 'p99'), cpuUs: med(k.name, 'cpuUs') },
      ]),
    ),
    servicePerPgbench: ratio('service', 'pgbench'),
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
    `  service/pgbench ${summary.servicePerPgbench.toFixed(2)}, service/HTTP ceiling ${summary.servicePerHttpCeiling.toFixed(2)}, node 24/node 20 ${summary.node24PerNode20.toFixed(2)}, 2 workers/1 ${summary.twoWorkersPerOne.toFixed(2)}; service p99 ${summary.medians.service?.p99.toFixed(2)} ms, CPU ${summary.medians.service?.cpuUs.toFixed(1)} µs/req; errors ${summary.errors}; every 200 a row: ${summary.rowsOk ? 'yes' : 'NO'}`,
  )
  results.ceilings = { rounds, summary }
}

// ---- levels: the service and pgbench at each number of connections ----
const service = await startService('service', url)
const servicePid = service.child.pid ?? 0
type Level = {
  connections: number
  serviceRps: number
  ceilingRps: number
  ratio: number
  p50: number
  p99: number
  max: number
  errors: number
  rowsPerStatement: number
  rssMb: number
  rowsOk: boolean
}
const levelRows: (Level & { run: number })[] = []
if (parts.has('levels')) {
  say('')
  say(
    'run  conns  service req/s   p50 ms   p99 ms   max ms  errors  rows  | pgbench tx/s  | ratio  rows/stmt  peak RSS MB',
  )
  for (let run = 1; run <= runs; run++) {
    for (const connections of levels) {
      await sql`truncate plants`
      const before = await batchRows(service.base)
      const s = await measure(service, connections)
      const after = await batchRows(service.base)
      const rss = rssMb(servicePid, 'VmHWM')
      await sql`truncate plants`
      const p = havePgbench ? await measurePgbench(connections) : undefined
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
      levelRows.push(row)
      say(
        `${f(run, 3)}  ${f(connections, 5)}  ${f(row.serviceRps, 13)}  ${f(row.p50, 7, 2)}  ${f(row.p99, 7, 2)}  ${f(row.max, 7, 1)}  ${f(row.errors, 6)}  ${row.rowsOk ? ' yes' : '  NO'}  | ${f(row.ceilingRps, 12)}  | ${f(row.ratio, 5, 2)}  ${f(row.rowsPerStatement, 9, 1)}  ${f(rss, 11)}`,
      )
    }
  }
}
const summary = levels.map((connections) => {
  const at = levelRows.filter((r) => r.connections === connections)
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
if (parts.has('levels')) {
  say('medians over runs')
  say('conns  service req/s  p50 ms  p99 ms  max ms  pgbench tx/s  ratio  rows/statement')
  for (const m of summary)
    say(
      `${f(m.connections, 5)}  ${f(m.serviceRps, 13)}  ${f(m.p50, 6, 2)}  ${f(m.p99, 6, 2)}  ${f(m.max, 6, 1)}  ${f(m.ceilingRps, 12)}  ${f(m.ratio, 5, 2)}  ${f(m.rowsPerStatement, 14, 1)}`,
    )
  results.levels = { rows: levelRows, summary }
}

/** The same load at 64 connections against two services, interleaved, `runs` rounds. */
async function compare(
  title: string,
  names: [string, string],
  services: [Running, Running],
  { connections = 64, rounds: roundCount = runs } = {},
) {
  const [a, b] = names
  say('')
  say(title)
  say(
    `run  ${`${a} req/s`.padStart(14)}  ${'p99 ms'.padStart(7)}  ${'CPU µs/req'.padStart(10)}  |  ${`${b} req/s`.padStart(14)}  ${'p99 ms'.padStart(7)}  ${'CPU µs/req'.padStart(10)}  |  req/s ratio  CPU ratio`,
  )
  const rounds: [Measured, Measured][] = []
  for (let run = 1; run <= roundCount; run++) {
    const pair: Measured[] = []
    for (const index of run % 2 === 1 ? [0, 1] : [1, 0]) {
      await sql`truncate plants`
      pair[index] = await measure(services[index] as Running, connections)
    }
    const [x, y] = pair as [Measured, Measured]
    rounds.push([x, y])
    say(
      `${f(run, 3)}  ${f(x.rps, 14)}  ${f(x.p99, 7, 2)}  ${f(x.cpuUs, 10, 1)}  |  ${f(y.rps, 14)}  ${f(y.p99, 7, 2)}  ${f(y.cpuUs, 10, 1)}  |  ${f(x.rps / y.rps, 11, 3)}  ${f(x.cpuUs / y.cpuUs, 9, 3)}`,
    )
  }
  const m = {
    [`${a}Rps`]: median(rounds.map(([x]) => x.rps)),
    [`${b}Rps`]: median(rounds.map(([, y]) => y.rps)),
    [`${a}P99`]: median(rounds.map(([x]) => x.p99)),
    [`${b}P99`]: median(rounds.map(([, y]) => y.p99)),
    ratio: median(rounds.map(([x, y]) => x.rps / y.rps)),
    cpuRatio: median(rounds.map(([x, y]) => x.cpuUs / y.cpuUs)),
    errors: rounds.reduce((sum, [x, y]) => sum + x.errors + y.errors, 0),
  }
  say(
    `medians: ${a}/${b} throughput ${m.ratio?.toFixed(3)}, CPU per request ${m.cpuRatio?.toFixed(3)}; p99 ${m[`${a}P99`]?.toFixed(2)} against ${m[`${b}P99`]?.toFixed(2)} ms; errors ${m.errors}`,
  )
  for (const done of services) await stop(done)
  return m
}

if (parts.has('observability'))
  results.observability = await compare(
    'metrics and trace context at 64 connections: on (the default) against off',
    ['on', 'off'],
    [
      await startService('on', url),
      await startService('off', url, { METRICS: 'off', TRACE_CONTEXT: 'off' }),
    ],
  )

if (parts.has('pgbouncer') && !pgbouncerPresent) {
  results.pgbouncer = `no PgBouncer at ${pgbouncerPath} (apt-get install pgbouncer)`
  say('')
  say(`pgbouncer: left out, ${results.pgbouncer}`)
} else if (parts.has('pgbouncer')) {
  const cleanups: (() => unknown)[] = []
  const bouncer = await startPgBouncer(
    url,
    { after: (fn) => void cleanups.push(fn) },
    { poolSize: 8 },
  )
  // Through the pooler the service sends no statement_timeout; the database carries it.
  await sql.unsafe(`alter database ${new URL(url).pathname.slice(1)} set statement_timeout = '5s'`)
  results.pgbouncer = await compare(
    'through PgBouncer 1.18 in transaction mode (pool of 8) against straight to PostgreSQL, 64 connections',
    ['pgbouncer', 'direct'],
    [
      await startService('pgbouncer', bouncer.url, {
        DATABASE_POOL_MODE: 'transaction',
        DATABASE_DIRECT_URL: url,
      }),
      await startService('direct', url),
    ],
  )
  for (const cleanup of cleanups.reverse()) await cleanup()
}

// ---- flat: a 60 s run at 64 connections in 10 s slices, last against first ----
const flats: { slices: number[]; ratio: number }[] = []
for (let run = 1; run <= runs && flatSeconds > 0 && parts.has('flat'); run++) {
  await sql`truncate plants`
  const slices: number[] = []
  let errors = 0
  const warm = await runWrk({
    url: service.base,
    token,
    connections: 64,
    seconds: warmup,
    firstId: nextId,
  })
  nextId = idsAfter(nextId, warm, 64)
  for (let s = 0; s < flatSeconds / 10; s++) {
    const r = await runWrk({
      url: service.base,
      token,
      connections: 64,
      seconds: 10,
      firstId: nextId,
    })
    nextId = idsAfter(nextId, r, 64)
    slices.push(r.rps)
    errors += r.errors
  }
  const ratio = (slices.at(-1) ?? Number.NaN) / (slices[0] ?? Number.NaN)
  flats.push({ slices, ratio })
  say(
    `flat ${run}: ${flatSeconds} s at 64 connections in 10 s slices: ${slices.map((x) => x.toFixed(0)).join(', ')} req/s; last/first ${ratio.toFixed(2)}; errors ${errors}`,
  )
}
const flatRatio = median(flats.map((x) => x.ratio))
const peakRss = rssMb(servicePid, 'VmHWM')
if (parts.has('flat') || parts.has('levels'))
  say(
    `flat: last/first 10 s median ${flatRatio.toFixed(2)}; peak RSS of the service (levels up to ${Math.max(...levels)} connections) ${peakRss.toFixed(0)} MB`,
  )
results.flat = { runs: flats, medianRatio: flatRatio, peakRssMb: peakRss }
await stop(service)

// ---- soak: a new service until it has sent N insert statements ----
if (soakStatements > 0) {
  const soaked = await startService('soak', url)
  const pid = soaked.child.pid ?? 0
  say('')
  say(
    `soak: ${soakConnections} connections until the service has sent ${soakStatements.toLocaleString('en')} insert statements, a minute at a time`,
  )
  say('minute  statements so far    req/s  statements/s  CPU µs/req  RSS MB')
  const minutes: {
    statements: number
    rps: number
    statementsPerSecond: number
    cpuUs: number
    rssMb: number
  }[] = []
  for (let minute = 1; ; minute++) {
    await sql`truncate plants`
    const before = await batchRows(soaked.base)
    const cpuBefore = cpuSeconds(pid)
    const r = await runWrk({
      url: soaked.base,
      token,
      connections: soakConnections,
      seconds: 60,
      firstId: nextId,
    })
    nextId = idsAfter(nextId, r, soakConnections)
    const after = await batchRows(soaked.base)
    const m = {
      statements: after.statements,
      rps: r.rps,
      statementsPerSecond: (after.statements - before.statements) / r.seconds,
      cpuUs: ((cpuSeconds(pid) - cpuBefore) * 1e6) / r.requests,
      rssMb: rssMb(pid, 'VmRSS'),
      errors: r.errors,
    }
    minutes.push(m)
    say(
      `${f(minute, 6)}  ${f(m.statements, 17)}  ${f(m.rps, 7)}  ${f(m.statementsPerSecond, 12)}  ${f(m.cpuUs, 10, 1)}  ${f(m.rssMb, 6)}`,
    )
    if (after.statements >= soakStatements) break
  }
  const first = minutes[0]
  const last = minutes.at(-1)
  if (first && last)
    say(
      `soak: last minute against the first: throughput ${(last.rps / first.rps).toFixed(2)}, CPU per request ${(last.cpuUs / first.cpuUs).toFixed(2)}, RSS ${first.rssMb.toFixed(0)} → ${last.rssMb.toFixed(0)} MB`,
    )
  // The machine's own drift over the soak is not the service's: a new service beside the soaked
  // one, interleaved, tells them apart.
  results.soak = {
    connections: soakConnections,
    minutes,
    soakedAgainstNew: await compare(
      `after the soak, ${soakConnections} connections: the soaked service against a new one`,
      ['soaked', 'new'],
      [soaked, await startService('new', url)],
      { connections: soakConnections, rounds: 3 },
    ),
  }
}

const outDir = join(root, 'bench-results')
await mkdir(outDir, { recursive: true })
const stamp = new Date().toISOString().replace(/[:.]/g, '-')
await writeFile(join(outDir, `bench-${stamp}.json`), `${JSON.stringify(results, null, 2)}\n`)
if (parts.has('levels')) {
  await writeFile(join(outDir, 'latest.svg'), renderChart(summary, flatRatio, peakRss))
  await writeFile(join(outDir, 'batch-rows.svg'), renderBatchChart(summary))
}
say(
  `results: bench-results/bench-${stamp}.json${parts.has('levels') ? ' and charts in bench-results/' : ''}`,
)

await sql.end({ timeout: 5 })
await stopDatabase()
