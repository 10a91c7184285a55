import { spawn, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { execPgbench } from './pgbench.ts'
import { root } from './processes.ts'

/**
 * What one open-loop run measured, of the requests due in its measured window (latencies in ms,
 * counted from each request's due time). `lagP99` is how late the generator itself sent the
 * requests that had a connection free: a run whose lag nears its latency measured the generator.
 */
export type OpenLoopResult = {
  readonly rate: number
  readonly measured: number
  readonly ok: number
  readonly unavailable: number
  readonly otherStatus: number
  readonly errors: number
  /** Requests due while all connections awaited an answer (sent late; still counted from due). */
  readonly waitedForConnection: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly p999: number
  readonly max: number
  readonly lagP50: number
  readonly lagP99: number
  readonly lagMax: number
  readonly cpuSeconds: number
  readonly lastId: number
  /** The p99 and the longest latency of the requests due in the measured window's first second. */
  readonly firstSecondP99: number
  readonly firstSecondMax: number
  /**
   * The measured window's slowest hundredth (its p99 and above), and how many of them were due
   * in its first two seconds: at a uniform rate a tenth of it would be, over 20 s.
   */
  readonly slowest: number
  readonly slowestInFirstTwoSeconds: number
}

/** The figures pgbench's per-transaction log gives as well: what runs of either are compared by. */
export type LatencyFigures = Omit<
  OpenLoopResult,
  | 'waitedForConnection'
  | 'lagMax'
  | 'cpuSeconds'
  | 'lastId'
  | 'firstSecondP99'
  | 'firstSecondMax'
  | 'slowest'
  | 'slowestInFirstTwoSeconds'
>

const source = join(root, 'bench', 'open-loop.c')
const binary = join(root, 'bench-results', '.bin', 'open-loop')

/** Builds bench/open-loop.c with the system's C compiler when the binary is missing or older. */
export function buildOpenLoop(): string {
  const stale = (() => {
    try {
      return statSync(binary).mtimeMs < statSync(source).mtimeMs
    } catch {
      return true
    }
  })()
  if (stale) {
    mkdirSync(join(root, 'bench-results', '.bin'), { recursive: true })
    const built = spawnSync('cc', ['-O2', '-Wall', '-o', binary, source], { encoding: 'utf8' })
    if (built.status !== 0)
      throw new Error(`cannot build bench/open-loop.c (cc): ${built.stderr || built.error}`)
  }
  return binary
}

/**
 * `rate` creates a second on a fixed schedule over `connections` keep-alive connections to
 * `base`, ids counting up from `firstId`: `warmup` seconds, then `seconds` measured.
 */
export async function runOpenLoop(o: {
  base: string
  token: string
  rate: number
  warmup: number
  seconds: number
  connections: number
  firstId: bigint
}): Promise<OpenLoopResult> {
  const { hostname, port } = new URL(o.base)
  const args = [hostname, port, String(o.rate), String(o.warmup), String(o.seconds)]
  args.push(String(o.connections), String(o.firstId), o.token)
  const child = spawn(buildOpenLoop(), args, { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString()
  })
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve))
  if (code !== 0) throw new Error(`open-loop failed (${code}): ${out}`)
  return JSON.parse(out) as OpenLoopResult
}

const percentile = (sorted: Float64Array, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN

// pgbench runs this long past the measured window: the transactions of its last ~50 ms wait
// for its own ending (33 to 73 ms at 3,345 /s, in every run), which no request of the service's
// generator meets (it waits for every answer of its window).
const pgbenchTailSeconds = 1

/**
 * pgbench's single-row inserts at `rate` transactions a second (`-R`, whose latency counts from
 * each transaction's scheduled start, as the open-loop generator's does), 64 clients, 2 threads,
 * prepared; the latencies of the transactions scheduled in the measured window (`seconds` after
 * `warmup`), as the generator counts the requests due in it, from its per-transaction log.
 * pgbench runs `pgbenchTailSeconds` longer, so that its own ending falls outside the window.
 */
export async function runPgbenchAtRate(o: {
  url: string
  script: string
  rate: number
  warmup: number
  seconds: number
}): Promise<LatencyFigures> {
  const dir = mkdtempSync(join(tmpdir(), 'plant-store-pgbench-log-'))
  try {
    const args = ['-n', '-M', 'prepared', '-c', '64', '-j', '2', '-R', String(o.rate)]
    args.push('-T', String(o.warmup + o.seconds + pgbenchTailSeconds))
    args.push('-l', '--log-prefix', join(dir, 'tx'))
    args.push('-f', o.script, o.url)
    const started = Date.now() / 1000
    const { code, out } = await execPgbench(args)
    if (code !== 0) throw new Error(`pgbench failed (${code}): ${out}`)
    // Each line: client, transaction, latency µs (or `failed`, `skipped`), script, the time it
    // ended (epoch s, µs), schedule lag µs. Its latency counts from its scheduled start, so that
    // start is its end less its latency.
    const latency: number[] = []
    const lag: number[] = []
    let failed = 0
    let firstEpoch = Number.POSITIVE_INFINITY
    const lines = readdirSync(dir).flatMap((f) =>
      readFileSync(join(dir, f), 'utf8').trim().split('\n'),
    )
    const rows = lines.map((l) => l.split(' '))
    for (const r of rows) firstEpoch = Math.min(firstEpoch, Number(r[4]))
    const from = Math.max(started, firstEpoch) + o.warmup
    const until = from + o.seconds
    for (const r of rows) {
      const ended = Number(r[4]) + Number(r[5]) / 1e6
      const done = r[2] !== 'failed' && r[2] !== 'skipped'
      const scheduled = done ? ended - Number(r[2]) / 1e6 : ended
      if (scheduled < from || scheduled >= until) continue
      if (!done) failed++
      else {
        latency.push(Number(r[2]) / 1000)
        lag.push(Number(r[6] ?? 0) / 1000)
      }
    }
    const sorted = Float64Array.from(latency).sort()
    const lags = Float64Array.from(lag).sort()
    return {
      rate: o.rate,
      measured: sorted.length + failed,
      ok: sorted.length,
      unavailable: 0,
      otherStatus: 0,
      errors: failed,
      p50: percentile(sorted, 0.5),
      p90: percentile(sorted, 0.9),
      p99: percentile(sorted, 0.99),
      p999: percentile(sorted, 0.999),
      max: sorted.at(-1) ?? Number.NaN,
      lagP50: percentile(lags, 0.5),
      lagP99: percentile(lags, 0.99),
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
