// npm run bench [-- --runs 3 --seconds 10 --warmup 3 --flat 60 --soak 0 --levels 16,64,256
//                  --only ceilings,levels,observability,pgbouncer,scheduling,flat[,baseline]
//                         [,growth][,citus][,rates][,spans]
//                  --peak N --shares 5,10,25,50,75 --settle 10 --fresh-seconds 20 --fresh-runs N
//                  --floor-pg
//                  --baseline DIR --ids sequential|random --rows 40000000
//                  --embedded-settings growth|default --citus-shards N]
// Starts PostgreSQL (DATABASE_URL, or an embedded one in a temporary folder) and measures, with
// wrk as the load generator (2 threads, keep-alive, one request in flight per connection):
// - ceilings: at 64 connections, interleaved rounds of pgbench single-row inserts (the
//   database's own ceiling), the service on this Node, on Node 24, with WORKERS=2, and a bare
//   node:http server (the HTTP ceiling);
// - levels: the service and pgbench at 16, 64 and 256 connections, with rows per statement and
//   the service's peak RSS;
// - observability, pgbouncer: two services side by side (metrics and trace context on/off;
//   through PgBouncer or not);
// - spans (not in the default set): spans exported over OTLP to a receiver in this process,
//   every request sampled, against none;
// - scheduling: WORKERS=2, each worker accepting its own connections (the default) against
//   Node's round robin through the primary;
// - baseline (with --baseline DIR): this checkout's service against another checkout's;
// - flat: a 60 s run in 10 s slices, last against first;
// - growth (not in the default set: it fills a table of --rows random ids, 40 million by
//   default): the service and pgbench on an empty table and on the full one, ids at random, a
//   checkpoint before each run, with WAL bytes per row; --embedded-settings default runs the
//   embedded PostgreSQL with PostgreSQL's own settings instead of those for a growing table;
// - citus (not in the default set; needs .ci/citus.sh): the service on a Citus coordinator with
//   two workers, two instances through the workers (one on each worker's URL), pgbench on the
//   same coordinator, and the service on a plain PostgreSQL 15, with
//   the worker connections each run opened, the CPU per create of each node, and a projection
//   to more workers; --citus-shards N redistributes plants into N shards first;
// - rates: latency at fixed rates (5 to 75 % of the service's peak, --peak or measured), open
//   loop (bench/open-loop.c: a schedule, latency from the due time), beside pgbench -R and the
//   floor, Fastify + pg (and --baseline DIR's service; --floor-pg: the floor on pg too; the
//   service on Node --node24 too, the image's runtime, when .ci/node-lts.sh finds it), each
//   target first served --settle seconds at 25 %, not counted; then a fresh instance's first
//   --fresh-seconds at 10 %;
// - soak (--soak N): runs until the service has sent N insert statements, a minute at a time,
//   and compares the first minute with the last (throughput, CPU per request, RSS).
// Each phase is a module of bench/phases/ that gets the shared bench (bench/bench.ts) and
// returns its figures. Prints them and writes JSON and SVG charts to bench-results/.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { cpus, tmpdir, totalmem } from 'node:os'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import { createToken } from '../src/auth/token-repository.ts'
import { startEmbedded } from '../src/db/start/embedded.ts'
import { migrate } from '../src/db/start/migrate.ts'
import { createLog } from '../src/log.ts'
import { isFailure } from '../src/outcome.ts'
import { type BenchOptions, createBench, say } from './bench.ts'
import { renderBatchChart, renderChart, renderRatesChart } from './chart.ts'
import { pgbenchPath, pgbenchVersion } from './pgbench.ts'
import { ceilingsPhase } from './phases/ceilings.ts'
import { citusPhase } from './phases/citus.ts'
import { flatPhase } from './phases/flat.ts'
import { growthPhase } from './phases/growth.ts'
import { levelsPhase } from './phases/levels.ts'
import {
  baselinePhase,
  observabilityPhase,
  pgbouncerPhase,
  schedulingPhase,
  spansPhase,
} from './phases/pairs.ts'
import { ratesPhase } from './phases/rates.ts'
import { soakPhase } from './phases/soak.ts'
import { root, rssMb, spawnService, stop } from './processes.ts'
import { wrkPath } from './wrk.ts'

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    flat: { type: 'string', default: '60' },
    soak: { type: 'string', default: '0' },
    'soak-connections': { type: 'string', default: '8' },
    levels: { type: 'string', default: '16,64,256' },
    only: {
      type: 'string',
      default: 'ceilings,levels,observability,pgbouncer,scheduling,flat,rates',
    },
    peak: { type: 'string' },
    'fresh-seconds': { type: 'string', default: '20' },
    'fresh-runs': { type: 'string' },
    settle: { type: 'string', default: '10' },
    shares: { type: 'string', default: '5,10,25,50,75' },
    'floor-pg': { type: 'boolean', default: false },
    node24: { type: 'string', default: '24.21.0' },
    baseline: { type: 'string' },
    ids: { type: 'string', default: 'sequential' },
    rows: { type: 'string', default: '40000000' },
    'embedded-settings': { type: 'string', default: 'growth' },
    'citus-shards': { type: 'string' },
  },
})
const parts = new Set(args.only.split(','))
// --baseline compares with another checkout in the rates part when that is asked for alone.
if (args.baseline !== undefined && !(parts.size === 1 && parts.has('rates'))) parts.add('baseline')
const options: BenchOptions = {
  runs: Number(args.runs),
  seconds: Number(args.seconds),
  warmup: Number(args.warmup),
  flatSeconds: Number(args.flat),
  soakStatements: Number(args.soak),
  soakConnections: Number(args['soak-connections']),
  levels: args.levels.split(',').map(Number),
  havePgbench: pgbenchPath() !== undefined,
  randomIds: args.ids === 'random',
}
const log = createLog('warn', (l) => process.stderr.write(l))

if (wrkPath() === undefined) {
  say('bench: wrk not found; install it (Debian: apt-get install wrk)')
  process.exit(1)
}
if (parts.has('baseline') && args.baseline === undefined) {
  say('bench: --only baseline needs --baseline DIR, a checkout with its own node_modules')
  process.exit(1)
}
if (!options.havePgbench)
  say('bench: pgbench not found (Debian: apt-get install postgresql-client); no pgbench comparison')

/** DATABASE_URL, or an embedded PostgreSQL that allows 256 clients twice over. */
async function openDatabase(): Promise<{ url: string; kind: string; stop: () => Promise<void> }> {
  const given = process.env.DATABASE_URL
  if (given) return { url: given, kind: 'DATABASE_URL', stop: async () => {} }
  const dir = await mkdtemp(join(tmpdir(), 'plant-store-bench-'))
  await chmod(dir, 0o755)
  const growth = args['embedded-settings'] !== 'default'
  const db = await startEmbedded({
    dir,
    log,
    shareRunning: false,
    settings: { max_connections: '600' },
    growth,
  })
  return {
    url: db.url,
    kind: `embedded PostgreSQL 18 (fsync on, ${growth ? 'settings for a growing table' : "PostgreSQL's default settings"})`,
    stop: async () => {
      await db.stop()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

function findNode24(): string | undefined {
  const found = spawnSync('bash', ['.ci/node-lts.sh', args.node24], { cwd: root, encoding: 'utf8' })
  const dir = found.stdout.trim()
  return found.status === 0 && existsSync(`${dir}/node`) ? `${dir}/node` : undefined
}

const database = await openDatabase()
await migrate(database.url, log)
const sql = postgres(database.url, { max: 2, onnotice: () => {} })
const token = await createToken(sql, `bench-${Date.now()}`)
if (isFailure(token)) throw new Error(token.message)
const bench = createBench(options, database.url, sql, token)
const node24 = parts.has('ceilings') || parts.has('rates') ? findNode24() : undefined

say(
  `plant store benchmark: ${options.runs} round(s), ${options.warmup} s warm-up + ${options.seconds} s per phase; load from wrk (2 threads)`,
)
say(
  `machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${Math.round(totalmem() / 2 ** 30)} GiB; node ${process.version}${node24 ? `, node 24 at ${node24}` : ', no node 24'}; database: ${database.kind}; ${options.havePgbench ? pgbenchVersion() : 'no pgbench'}`,
)
const results: Record<string, unknown> = {
  when: new Date().toISOString(),
  databaseKind: database.kind,
  runs: options.runs,
}

if (parts.has('ceilings')) results.ceilings = await ceilingsPhase(bench, node24)

// One service for the levels and the flat run, whose peak RSS covers both.
const service =
  parts.has('levels') || parts.has('flat') ? await spawnService('service', database.url) : undefined
let levels: Awaited<ReturnType<typeof levelsPhase>> | undefined
if (service && parts.has('levels')) results.levels = levels = await levelsPhase(bench, service)

if (parts.has('observability')) results.observability = await observabilityPhase(bench)
if (parts.has('pgbouncer')) results.pgbouncer = await pgbouncerPhase(bench)
if (parts.has('scheduling')) results.scheduling = await schedulingPhase(bench)
if (parts.has('spans')) results.spans = await spansPhase(bench)
if (parts.has('baseline') && args.baseline !== undefined)
  results.baseline = await baselinePhase(bench, resolve(args.baseline))

let flatRatio = Number.NaN
let peakRss = Number.NaN
if (service) {
  if (parts.has('flat') && options.flatSeconds > 0) {
    const flat = await flatPhase(bench, service)
    flatRatio = flat.medianRatio
    results.flat = flat
  }
  peakRss = rssMb(service.child.pid ?? 0, 'VmHWM')
  say(
    `flat: last/first 10 s median ${flatRatio.toFixed(2)}; peak RSS of the service (levels up to ${Math.max(...options.levels)} connections) ${peakRss.toFixed(0)} MB`,
  )
  results.peakRssMb = peakRss
  await stop(service)
}

let rates: Awaited<ReturnType<typeof ratesPhase>> | undefined
if (parts.has('rates'))
  results.rates = rates = await ratesPhase(bench, {
    peak: args.peak === undefined ? undefined : Number(args.peak),
    baseline: args.baseline === undefined ? undefined : resolve(args.baseline),
    freshSeconds: Number(args['fresh-seconds']),
    freshRuns: args['fresh-runs'] === undefined ? options.runs : Number(args['fresh-runs']),
    settleSeconds: Number(args.settle),
    shares: args.shares
      .split(',')
      .filter((s) => s !== '')
      .map((s) => Number(s) / 100),
    floorPg: args['floor-pg'],
    node24,
  })
if (options.soakStatements > 0) results.soak = await soakPhase(bench)
if (parts.has('growth')) results.growth = await growthPhase(bench, Number(args.rows))
if (parts.has('citus')) {
  const shards = args['citus-shards'] === undefined ? undefined : Number(args['citus-shards'])
  if (shards !== undefined && !(Number.isInteger(shards) && shards > 0))
    throw new Error(`--citus-shards must be a positive integer, not ${args['citus-shards']}`)
  results.citus = await citusPhase(bench, shards)
}

const outDir = join(root, 'bench-results')
await mkdir(outDir, { recursive: true })
const stamp = new Date().toISOString().replace(/[:.]/g, '-')
await writeFile(join(outDir, `bench-${stamp}.json`), `${JSON.stringify(results, null, 2)}\n`)
if (levels) {
  await writeFile(join(outDir, 'latest.svg'), renderChart(levels.summary, flatRatio, peakRss))
  await writeFile(join(outDir, 'batch-rows.svg'), renderBatchChart(levels.summary))
}
if (rates)
  await writeFile(join(outDir, 'rates.svg'), renderRatesChart(rates.summary, rates.peakRps))
say(
  `results: bench-results/bench-${stamp}.json${levels || rates ? ' and charts in bench-results/' : ''}`,
)

await sql.end({ timeout: 5 })
await database.stop()
