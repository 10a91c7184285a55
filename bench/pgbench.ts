import { spawn, spawnSync } from 'node:child_process'
import { rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** Where pgbench is (Debian: apt-get install postgresql-client, or postgresql), or undefined. */
export function pgbenchPath(): string | undefined {
  const found = spawnSync('sh', ['-c', 'command -v pgbench'], { encoding: 'utf8' })
  return found.status === 0 ? found.stdout.trim() : undefined
}

export function pgbenchVersion(): string {
  return spawnSync('pgbench', ['--version'], { encoding: 'utf8' }).stdout.trim()
}

// One single-row INSERT per transaction, as the service's clients would send them one by one;
// random 63-bit ids, so that runs never collide (a collision would count as a failure).
export const singleInsertScript = join(tmpdir(), `plant-store-pgbench-${process.pid}.sql`)
writeFileSync(
  singleInsertScript,
  "\\set id random(1, 9000000000000000000)\nINSERT INTO plants (id, name, tag, created_by) VALUES (:id, 'bench plant', 'bench', 'bench');\n",
)
// The database's batched ceiling: 30 rows at random over the int64 range in one statement, of the
// shape the service sends (a set of rows, ON CONFLICT DO NOTHING), from 2 clients as the service's
// 2 statements in flight.
export const batchedRows = 30
const batchedScript = join(tmpdir(), `plant-store-pgbench-batched-${process.pid}.sql`)
writeFileSync(
  batchedScript,
  `INSERT INTO plants (id, name, tag, created_by) SELECT (random() * 1.8e19 - 9.0e18)::int8, 'bench plant', 'bench', 'bench' FROM generate_series(1, ${batchedRows}) ON CONFLICT (id) DO NOTHING;\n`,
)
process.on('exit', () => {
  rmSync(singleInsertScript, { force: true })
  rmSync(batchedScript, { force: true })
})

/** Runs pgbench with `args`; its exit code and all it printed. */
export async function execPgbench(args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawn('pgbench', args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString()
  })
  child.stderr.on('data', (c: Buffer) => {
    out += c.toString()
  })
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve))
  return { code, out }
}

/**
 * PostgreSQL's own benchmark client: single-row inserts (or 30-row ones), prepared,
 * `connections` clients.
 */
export async function runPgbench(o: {
  url: string
  connections: number
  seconds: number
  /** 30-row statements (`batchedRows`) instead of single-row inserts. */
  batched?: boolean
}): Promise<{ tps: number; latencyMs: number; failed: number; transactions: number }> {
  const args = ['-n', '-M', 'prepared', '-c', String(o.connections), '-j', '2']
  args.push('-T', String(o.seconds), '-f', o.batched ? batchedScript : singleInsertScript, o.url)
  const { code, out } = await execPgbench(args)
  const tps = Number(/tps = ([\d.]+)/.exec(out)?.[1])
  if (code !== 0 || Number.isNaN(tps)) throw new Error(`pgbench failed (${code}): ${out}`)
  return {
    tps,
    latencyMs: Number(/latency average = ([\d.]+) ms/.exec(out)?.[1]),
    failed: Number(/number of failed transactions: (\d+)/.exec(out)?.[1] ?? 0),
    transactions: Number(/number of transactions actually processed: (\d+)/.exec(out)?.[1]),
  }
}
