import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { freePort } from '../src/db/start/embedded.ts'

/** The project folder. */
export const root = fileURLToPath(new URL('..', import.meta.url))

/** A measured process: the service (`src/main.ts` as its own process) or the bare HTTP server. */
export type Running = { child: ChildProcess; base: string; name: string }

/** CPU seconds (user and system) of a process and its children (cluster workers). */
export function cpuSeconds(pid: number): number {
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

/**
 * CPU seconds of a server and all its processes, those that have exited too (a parent that
 * waits for its children, as PostgreSQL's postmaster does, is credited with their time).
 */
export function serverCpuSeconds(pid: number): number {
  const all = (p: number) => {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0) / 100
    } catch {
      return 0
    }
  }
  return all(pid) + children(pid).reduce((sum, c) => sum + all(c), 0)
}

function children(pid: number): number[] {
  const file = `/proc/${pid}/task/${pid}/children`
  return existsSync(file)
    ? readFileSync(file, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
    : []
}

/** A process's peak (`VmHWM`) or current (`VmRSS`) resident memory, in MB. */
export function rssMb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN) / 1024
}

/**
 * Spawns the service as production runs it, `node --import tsx src/main.ts` in `cwd` (this
 * checkout, or another one to compare with), its log to /dev/null; resolves once it is ready.
 */
export async function spawnService(
  name: string,
  url: string,
  settings: Record<string, string> = {},
  { node = process.execPath, cwd = root } = {},
): Promise<Running> {
  const port = await freePort()
  const child = spawn(node, ['--import', 'tsx', 'src/main.ts'], {
    cwd,
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

/** Spawns a bench server (`file`, which prints its port on the first line of stdout). */
async function spawnBenchServer(
  file: string,
  name: string,
  env: Record<string, string> = {},
): Promise<Running> {
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const port = await new Promise<string>((resolve) =>
    child.stdout?.once('data', (c: Buffer) => resolve(c.toString().trim())),
  )
  return { child, base: `http://127.0.0.1:${port}`, name }
}

/** Spawns the bare node:http server of bench/http-ceiling.ts. */
export const spawnHttpCeiling = () => spawnBenchServer('bench/http-ceiling.ts', 'HTTP ceiling')

/** Spawns the minimal coalescing server of bench/floor-server.ts on the database at `url`. */
export const spawnFloor = (url: string, driver: 'postgres' | 'pg' = 'postgres') =>
  spawnBenchServer('bench/floor-server.ts', driver === 'pg' ? 'floor on pg' : 'floor', {
    DATABASE_URL: url,
    FLOOR_DRIVER: driver,
  })

/** Spawns bench/fastify-pg.ts (Fastify 5 and pg, a single-row insert per request) at `url`. */
export const spawnFastify = (url: string, token: string) =>
  spawnBenchServer('bench/fastify-pg.ts', 'fastify', { DATABASE_URL: url, TOKEN: token })

/** Stops a spawned process with SIGTERM and waits for it. */
export async function stop(r: Running): Promise<void> {
  if (r.child.exitCode !== null) return
  r.child.kill('SIGTERM')
  await new Promise((resolve) => r.child.on('exit', resolve))
}

/** Rows and statements so far, from the service's plant_store_create_batch_rows histogram. */
export async function batchRows(base: string): Promise<{ rows: number; statements: number }> {
  const text = await (await fetch(`${base}/metrics`)).text()
  const value = (name: string) =>
    Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN)
  return {
    rows: value('plant_store_create_batch_rows_sum'),
    statements: value('plant_store_create_batch_rows_count'),
  }
}
