import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const script = fileURLToPath(new URL('./create.lua', import.meta.url))

/** What one wrk run measured (latencies in milliseconds). */
export type WrkResult = {
  /** Responses in the window, of any status. */
  readonly requests: number
  readonly seconds: number
  readonly rps: number
  readonly p50: number
  readonly p99: number
  readonly max: number
  /** Non-2xx answers, and socket errors and timeouts. */
  readonly errors: number
}

/** Where wrk is, or undefined (Debian: apt-get install wrk). */
export function wrkPath(): string | undefined {
  const found = spawnSync('sh', ['-c', 'command -v wrk'], { encoding: 'utf8' })
  return found.status === 0 ? found.stdout.trim() : undefined
}

/**
 * Runs wrk (2 threads) against `url`: `POST /plants` with unique ids from `firstId` when a
 * token is given (bench/create.lua), otherwise the same POST to a bare server.
 */
export async function runWrk(o: {
  url: string
  token: string
  connections: number
  seconds: number
  firstId: bigint
  /** Ids at random over the int64 range instead of counting up from `firstId`. */
  randomIds?: boolean
}): Promise<WrkResult> {
  const args = [
    '-t',
    String(Math.min(2, o.connections)),
    '-c',
    String(o.connections),
    '-d',
    `${o.seconds}s`,
    '--timeout',
    '10s',
    '-s',
    script,
    o.url,
  ]
  const child = spawn('wrk', args, {
    env: {
      ...process.env,
      BENCH_TOKEN: o.token,
      BENCH_FIRST_ID: String(o.firstId),
      BENCH_RANDOM: o.randomIds ? '1' : '0',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let out = ''
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString()
  })
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve))
  const line = /^WRK_RESULT (.*)$/m.exec(out)?.[1]
  if (code !== 0 || line === undefined) throw new Error(`wrk failed (${code}): ${out}`)
  const r = JSON.parse(line) as Record<string, number>
  const n = (k: string) => r[k] ?? Number.NaN
  return {
    requests: n('requests'),
    seconds: n('seconds'),
    rps: n('requests') / n('seconds'),
    p50: n('p50') / 1000,
    p99: n('p99') / 1000,
    max: n('max') / 1000,
    errors: n('status') + n('connect') + n('read') + n('write') + n('timeout'),
  }
}

/** The ids a wrk run may have used from `firstId` on: 16 per request, plus room. */
export function idsAfter(firstId: bigint, r: WrkResult, connections: number): bigint {
  return firstId + 16n * BigInt(r.requests + connections + 16)
}
