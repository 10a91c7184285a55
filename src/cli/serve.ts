import cluster from 'node:cluster'
import process from 'node:process'
import type { Config } from '../config.ts'
import { limits } from '../limits.ts'
import { coalescedWriter, createLog, describeError, type Log, logDestination } from '../log.ts'
import { runPrimary } from '../primary.ts'
import { startService } from '../service.ts'

/** What this process is: the whole service, a WORKERS primary, or one of its workers. */
export type Role = 'single' | 'primary' | 'worker'

/** The one place where the process's role is decided. */
export function processRole(config: Config): Role {
  if (cluster.isWorker) return 'worker'
  return config.workers > 1 ? 'primary' : 'single'
}

/**
 * `npm start`: serves until SIGINT or SIGTERM, which also stop a start in progress; resolves
 * with the exit status. `dataDir` is the embedded database's home (tests use a folder of theirs).
 */
export async function serve(
  config: Config,
  { dataDir }: { dataDir?: string } = {},
): Promise<number> {
  if (config.workers > 1 && 'Deno' in globalThis) {
    process.stderr.write(
      `plant-store: WORKERS=${config.workers} needs node:cluster, which Deno does not provide; under Deno run one process (WORKERS=1) per instance\n`,
    )
    return 1
  }
  const role = processRole(config)
  const worker = role === 'worker' ? cluster.worker : undefined
  // Workers share the primary's standard output: writes of at most PIPE_BUF stay whole.
  // A destination that is full or broken drops lines (counted), never stops the service.
  const out = coalescedWriter(logDestination(1), worker === undefined ? undefined : 4096)
  process.on('exit', out.flush)
  const log = createLog(
    config.logLevel,
    out.write,
    worker === undefined ? undefined : { worker: worker.id },
  )
  let stopping: ((signal: string) => void) | undefined
  let signalled: string | undefined
  let signals = 0
  const stopped = new Promise<string>((resolve) => {
    stopping = resolve
  })
  // Installed before anything starts: a signal during start-up stops the process too.
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.on(signal, () => {
      signalled ??= signal
      signals++
      stopping?.(signal)
    })
  if (role === 'primary') return runPrimary(config, log, stopped, () => signalled, dataDir)
  // A worker whose primary is gone (killed) stops as on SIGTERM.
  if (role === 'worker') process.on('disconnect', () => stopping?.('disconnect from the primary'))
  const starting = startService(config, log, {
    role,
    stopRequested: () => signalled,
    ...(dataDir !== undefined && { dataDir }),
  })
  const first = await Promise.race([starting.then(() => undefined), stopped]).catch(() => undefined)
  if (first !== undefined) {
    // Every step of the start is bounded (connect time-outs); whatever it started is released.
    log.info('a signal came during start-up; stopping', { signal: first })
    const service = await starting.catch(() => undefined)
    await service?.close(0)
    log.info('stopped')
    return 0
  }
  let service: Awaited<ReturnType<typeof startService>>
  try {
    service = await starting
  } catch (err) {
    log.error('the service did not start', { error: describeError(err) })
    return 1
  }
  const signal = await stopped
  await leave(service, signal, config.drainDelay, log, () => signals > 1)
  const inFlight = inFlightGrace(signal === 'SIGTERM' ? config.drainDelay : 0)
  log.info('finishing requests in flight', { atMostMs: inFlight })
  await service.close(inFlight)
  log.info('stopped')
  return 0
}

/**
 * How long requests in flight may finish after a drain delay of `delayMs`: what is left of the
 * whole stop (`limits.drain`), but never less than a request's own deadline needs.
 */
function inFlightGrace(delayMs: number): number {
  return Math.max(limits.drain - delayMs, limits.drainInFlight)
}

/**
 * The drain delay of a rolling deploy: on SIGTERM the instance says at once that it is leaving
 * (`/readyz` 503) and goes on serving for `delayMs`, every answer closing its connection, so
 * that a balancer marks it down and moves on before its port closes. SIGINT (a terminal's
 * Ctrl-C) skips it; so does a second signal (`interrupted`) during it.
 */
async function leave(
  service: { leave: (reason: string) => void },
  signal: string,
  delayMs: number,
  log: Log,
  interrupted: () => boolean,
): Promise<void> {
  if (signal !== 'SIGTERM' || delayMs === 0) {
    log.info('signal received; stopping', { signal })
    return
  }
  service.leave(`the instance is shutting down (${signal})`)
  log.info(
    'signal received; /readyz says 503 and every answer closes its connection for the drain delay (DRAIN_DELAY), then the port closes',
    { signal, drainDelayMs: delayMs },
  )
  const started = performance.now()
  while (performance.now() - started < delayMs && !interrupted())
    await new Promise((r) => setTimeout(r, Math.min(100, delayMs)))
}
