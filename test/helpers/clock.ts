import type { Cancel, Clock } from '../../src/clock.ts'

/** Lets promise chains and `soon` callbacks run: a few turns of the event loop. */
export async function settle(turns = 5): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise((done) => setImmediate(done))
}

/**
 * A `Clock` that moves only when the test says (`advance`), so that a test of deadlines and
 * orders waits on no real time. Its `soon` is a real turn of the event loop (no time passes).
 */
export function manualClock(start = 1000) {
  let now = start
  let seq = 0
  const timers: { at: number; seq: number; run: () => void }[] = []

  const clock: Clock = {
    now: () => now,
    after(ms: number, run: () => void): Cancel {
      const timer = { at: now + Math.max(0, ms), seq: seq++, run }
      timers.push(timer)
      return () => {
        const i = timers.indexOf(timer)
        if (i >= 0) timers.splice(i, 1)
      }
    },
    soon(run: () => void): void {
      setImmediate(run)
    },
  }

  /** The earliest timer due at or before `until` (the first set among equals). */
  function nextDue(until: number) {
    let next: (typeof timers)[number] | undefined
    for (const t of timers)
      if (
        t.at <= until &&
        (next === undefined || t.at < next.at || (t.at === next.at && t.seq < next.seq))
      )
        next = t
    return next
  }

  return {
    clock,
    /**
     * Moves time forward by `ms`, running each timer that falls due on the way at its own time,
     * in order, and letting what it sets off run before the next.
     */
    async advance(ms: number): Promise<void> {
      const until = now + ms
      await settle()
      for (let next = nextDue(until); next !== undefined; next = nextDue(until)) {
        timers.splice(timers.indexOf(next), 1)
        now = Math.max(now, next.at)
        next.run()
        await settle()
      }
      now = until
      await settle()
    },
    /** Timers set and not yet run or cancelled. */
    pending: () => timers.length,
  }
}
