// npx tsx bench/driver-gc.ts [--rate 3000] [--seconds 10]
// What a driver leaves for the young-generation collector, with nothing else in the process: the
// floor's pattern (creates arrive on a 1-ms timer into a queue; at most 2 statements in flight,
// each a batch of what waited as the service's `unnest` insert; the next sent from the last
// one's completion) and the same with each statement slot a long-lived async loop, on the
// `postgres` driver and on `pg`. Each runs as its own process under --trace-gc-nvp; printed:
// the scavenges after the first 2.5 s, the share of what was allocated that survived one, and
// their pauses. Starts an embedded PostgreSQL 18 in a temporary folder (or DATABASE_URL).
import { spawn } from 'node:child_process'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import pg from 'pg'
import postgres from 'postgres'
import { startEmbedded } from '../src/db/start/embedded.ts'
import { migrate } from '../src/db/start/migrate.ts'
import { createLog } from '../src/log.ts'
import { median } from './bench.ts'
import { root } from './processes.ts'

/** The load, in a child process: `driver,shape` at `rate` creates a second for `seconds`. */
async function load(
  url: string,
  driver: string,
  shape: string,
  rate: number,
  seconds: number,
): Promise<void> {
  const sql = driver === 'postgres' ? postgres(url, { max: 2, onnotice: () => {} }) : undefined
  const pool = driver === 'pg' ? new pg.Pool({ connectionString: url, max: 2 }) : undefined
  const text =
    "insert into plants (id, name, tag, created_by) select id, 'gc', null, 'driver-gc' from unnest($1::int8[]) as t(id) on conflict (id) do nothing returning id::text"
  const insert = (ids: string[]): Promise<unknown> =>
    sql !== undefined
      ? sql`insert into plants (id, name, tag, created_by) select id, 'gc', null, 'driver-gc' from unnest(${ids}::int8[]) as t(id) on conflict (id) do nothing returning id::text`
      : (pool as pg.Pool).query({ name: 'insert', text, values: [ids] })
  let next = BigInt(Date.now()) * 1000n
  let queue: string[] = []
  let inFlight = 0
  const wakers: (() => void)[] = []
  function send(): void {
    if (shape === 'worker') {
      wakers.shift()?.()
      return
    }
    while (inFlight < 2 && queue.length > 0) {
      const batch = queue
      queue = []
      inFlight++
      void insert(batch).finally(() => {
        inFlight--
        send()
      })
    }
  }
  async function slot(): Promise<void> {
    for (;;) {
      if (queue.length === 0) await new Promise<void>((r) => wakers.push(r))
      const batch = queue
      queue = []
      if (batch.length > 0) await insert(batch)
    }
  }
  if (shape === 'worker') for (let i = 0; i < 2; i++) void slot()
  let due = 0
  const started = performance.now()
  setInterval(() => {
    const owed = Math.floor(((performance.now() - started) * rate) / 1000)
    for (; due < owed; due++) {
      queue.push(String(next++))
      send()
    }
  }, 1)
  setTimeout(() => process.exit(0), seconds * 1000)
}

/** The scavenges of a run: how many, the share of allocation that survived one, their pauses. */
export type Figures = {
  scavenges: number
  survived: number
  pauseMedian: number
  pauseMax: number
}

/** Scavenges after the first 2.5 s in a --trace-gc-nvp log. */
function scavenges(log: string): Figures {
  const rows: { pause: number; survived: number; allocated: number }[] = []
  for (const line of log.split('\n')) {
    const at = /(\d+) ms: pause=([\d.]+) .*gc=s /.exec(line)
    if (at === null || Number(at[1]) < 2500) continue
    const field = (k: string) => Number(new RegExp(` ${k}=(\\d+)`).exec(line)?.[1] ?? 0)
    rows.push({
      pause: Number(at[2]),
      survived: field('promoted') + field('new_space_survived'),
      allocated: field('allocated'),
    })
  }
  const pauses = rows.map((r) => r.pause)
  const sum = (k: 'survived' | 'allocated') => rows.reduce((s, r) => s + r[k], 0)
  return {
    scavenges: rows.length,
    survived: sum('survived') / Math.max(1, sum('allocated')),
    pauseMedian: median(pauses),
    pauseMax: pauses.length === 0 ? Number.NaN : Math.max(...pauses),
  }
}

/**
 * Runs `driver` ('postgres' or 'pg') in `shape` ('floor': each statement sent from the last
 * one's completion; 'worker': long-lived slot loops) at `rate` creates a second for `seconds`
 * on the database at `url`, in a process of its own, and reads its scavenges.
 */
export async function measure(
  url: string,
  driver: string,
  shape: string,
  { rate = 3000, seconds = 10 } = {},
): Promise<Figures> {
  const child = spawn(
    process.execPath,
    [
      '--trace-gc-nvp',
      '--import',
      'tsx',
      'bench/driver-gc.ts',
      '--child',
      `${driver},${shape}`,
      '--rate',
      String(rate),
      '--seconds',
      String(seconds),
    ],
    { cwd: root, env: { ...process.env, DATABASE_URL: url }, stdio: ['ignore', 'pipe', 'inherit'] },
  )
  child.stdout.setEncoding('utf8')
  let out = ''
  child.stdout.on('data', (c: string) => {
    out += c
  })
  await new Promise((resolve) => child.on('exit', resolve))
  return scavenges(out)
}

const direct =
  process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)
const { values: args } = direct
  ? parseArgs({
      options: {
        child: { type: 'string' },
        rate: { type: 'string', default: '3000' },
        seconds: { type: 'string', default: '10' },
      },
    })
  : { values: undefined }
const rate = Number(args?.rate)
const seconds = Number(args?.seconds)

if (args?.child !== undefined) {
  const [driver = 'postgres', shape = 'floor'] = args.child.split(',')
  await load(process.env.DATABASE_URL ?? '', driver, shape, rate, seconds)
} else if (direct) {
  const log = createLog('warn', (l) => process.stderr.write(l))
  const given = process.env.DATABASE_URL
  // A folder for an embedded PostgreSQL only when no DATABASE_URL is given; as root the server
  // runs as postgres, which must be able to enter it.
  const dir = given ? undefined : await mkdtemp(join(tmpdir(), 'plant-store-driver-gc-'))
  if (dir !== undefined) await chmod(dir, 0o755)
  const db = dir === undefined ? undefined : await startEmbedded({ dir, log, shareRunning: false })
  const url = given ?? db?.url ?? ''
  await migrate(url, log)
  process.stdout.write(
    `driver-gc: ${rate} creates/s, ${seconds} s each (scavenges after the first 2.5 s)\n`,
  )
  for (const shape of ['floor', 'worker'])
    for (const driver of ['postgres', 'pg']) {
      const r = await measure(url, driver, shape, { rate, seconds })
      process.stdout.write(
        `  ${`${driver}, ${shape}`.padEnd(18)} scavenges ${String(r.scavenges).padStart(4)}  survived ${(r.survived * 100).toFixed(1).padStart(5)} % of allocation  pause median ${r.pauseMedian.toFixed(2)} ms, max ${r.pauseMax.toFixed(2)} ms\n`,
      )
    }
  await db?.stop()
  if (dir !== undefined) await rm(dir, { recursive: true, force: true })
}
