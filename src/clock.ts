/**
 * Time as the create path reads it: a monotonic `now` (ms, `performance.now()`'s scale, never
 * the wall), a timer, and a turn of the event loop. The batcher, the waiting queue and the HTTP
 * server take one, so that their tests replace it (test/helpers/clock.ts) and assert orders and
 * deadlines without waiting on real time.
 */
export type Clock = {
  /** Milliseconds on a monotonic scale: only differences mean anything. */
  readonly now: () => number
  /**
   * Runs `run` once, `ms` from now; the function returned cancels it. A `background` timer does
   * not keep the process alive by itself (a log line that may come, not an answer owed).
   */
  readonly after: (ms: number, run: () => void, background?: boolean) => Cancel
  /** Runs `run` after the current I/O phase (`setImmediate`): what arrived in it goes together. */
  readonly soon: (run: () => void) => void
}

/** Cancels a timer; cancelling one that ran, or twice, does nothing. */
export type Cancel = () => void

/** The process's own clock. */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  after(ms: number, run: () => void, background = false): Cancel {
    const timer = setTimeout(run, Math.max(0, ms))
    // Deno's timers are numbers, without unref.
    if (background) (timer as { unref?: () => void }).unref?.()
    return () => clearTimeout(timer)
  },
  soon(run: () => void): void {
    setImmediate(run)
  },
})

/** A promise that resolves `ms` from now on `clock`. */
export function sleepOn(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => {
    clock.after(ms, resolve)
  })
}

/**
 * One timer on `clock` that runs `run` at the earliest time asked of it (`at`, on the clock's
 * scale): asking for a later time than the one set changes nothing, an earlier one moves it.
 * Once it has run, the next time asked sets it again. It runs in the background: what it
 * watches keeps the process alive by other means (a request's connection, a statement's).
 */
export function earliestTimer(clock: Clock, run: () => void): (at: number) => void {
  let setFor = Number.POSITIVE_INFINITY
  let cancel: Cancel | undefined
  const ran = () => {
    cancel = undefined
    setFor = Number.POSITIVE_INFINITY
    run()
  }
  return (at) => {
    if (at >= setFor) return
    cancel?.()
    setFor = at
    cancel = clock.after(at - clock.now(), ran, true)
  }
}
