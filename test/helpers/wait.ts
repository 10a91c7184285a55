import { monitorEventLoopDelay } from 'node:perf_hooks'

/**
 * Starts measuring how long this process's event loop stands still (its timers late by as
 * much); the returned function stops and gives the longest, in ms. Stopped after `t` anyway.
 */
export function watchStalls(t: { after: (fn: () => unknown) => void }): () => number {
  const loop = monitorEventLoopDelay({ resolution: 10 })
  loop.enable()
  t.after(() => loop.disable())
  return () => {
    loop.disable()
    return loop.max / 1e6
  }
}

/** Polls `check` every 20 ms until it is true; resolves with the milliseconds that took. */
export async function within(ms: number, check: () => boolean | Promise<boolean>): Promise<number> {
  const started = performance.now()
  while (performance.now() - started < ms) {
    if (await check()) return performance.now() - started
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`not true within ${ms} ms`)
}

/**
 * Waits `ms`: for a span of time that is itself what a test is about (load kept up for a while,
 * a period in which something must not happen, a fault that lasts). To wait for something to
 * become true, use `within`.
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)))
}
