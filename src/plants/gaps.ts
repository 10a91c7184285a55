import type { ResendReason } from '../db/reach/unavailable.ts'
import { describeError, type Log } from '../log.ts'
import type { BatchHooks } from './batcher.ts'

/** What the metrics hear of creates held through a gap (see metrics.ts). */
export type GapMetrics = {
  readonly createsResent: (reason: ResendReason, creates: number) => void
  readonly heldCreateEnded: (outcome: 'answered' | 'unavailable', seconds: number) => void
}

/**
 * A gap is over once statements have gone through for this long with none failing for want of a
 * database: a statement slot that keeps failing (refused for want of connections) while another
 * gets through keeps one gap open, rather than opening and closing one a few times a second.
 */
const quietMs = 1000

/**
 * The batcher's hooks that tell of gaps in the database: a gap begins with a statement that
 * fails for want of a database, and ends with the first statement through after the last such
 * failure, once `quietMs` has passed with none. One log line when it begins and one when it ends
 * (how long, the creates held, the creates sent again, the creates answered 503), instead of a
 * warning per create; and the metrics of every resend and of every held create's wait. `where`
 * names the database in the lines (a Citus group's primary, as it is when the line is written).
 */
export function gapHooks(
  log: Log,
  metrics: GapMetrics,
  where?: () => string,
): Pick<BatchHooks, 'held' | 'through' | 'heldEnded' | 'expired'> {
  type Gap = {
    readonly began: number
    readonly reasons: Set<ResendReason>
    held: number
    resent: number
    unavailable: number
    lastFailure: number
    /** The first statement through since the last failure. */
    backAt: number | undefined
  }
  let gap: Gap | undefined
  let timer: ReturnType<typeof setTimeout> | undefined
  const node = () => (where === undefined ? {} : { node: where() })
  const suffix = () => (where === undefined ? '' : ` (${where()})`)

  function end(open: Gap): void {
    gap = undefined
    const { began, reasons, held, resent, unavailable, backAt = performance.now() } = open
    const ms = Math.round(backAt - began)
    log.warn(
      `the database took creates again${suffix()} after ${ms} ms: ${held} creates held, ${resent} sent again, ${unavailable} answered 503`,
      { gapMs: ms, held, resent, unavailable, reasons: [...reasons].join(','), ...node() },
    )
  }

  function check(): void {
    timer = undefined
    if (gap?.backAt === undefined) return
    const quietFor = performance.now() - gap.lastFailure
    if (quietFor >= quietMs) end(gap)
    else {
      timer = setTimeout(check, quietMs - quietFor)
      timer.unref?.()
    }
  }

  return {
    held(reason, items, first, err) {
      metrics.createsResent(reason, items)
      const now = performance.now()
      if (gap === undefined) {
        gap = {
          began: now,
          reasons: new Set(),
          held: 0,
          resent: 0,
          unavailable: 0,
          lastFailure: now,
          backAt: undefined,
        }
        log.warn(
          `the database is unavailable${suffix()}: holding creates and sending them again until their deadlines`,
          {
            reason,
            code: String((err as { code?: unknown } | null)?.code ?? ''),
            error: describeError(err),
            ...node(),
          },
        )
      }
      gap.reasons.add(reason)
      gap.held += first
      gap.resent += items
      gap.lastFailure = now
      gap.backAt = undefined
    },
    through() {
      if (gap === undefined || gap.backAt !== undefined) return
      gap.backAt = performance.now()
      if (timer === undefined) check()
    },
    heldEnded: metrics.heldCreateEnded,
    expired() {
      if (gap !== undefined) gap.unavailable++
    },
  }
}
