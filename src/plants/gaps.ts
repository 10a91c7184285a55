import { type Cancel, type Clock, systemClock } from '../clock.ts'
import { type ResendReason, readError } from '../db/reach/unavailable.ts'
import { describeError, type Log } from '../log.ts'
import type { BatchHooks } from './batcher.ts'
import type { HeldOutcome } from './waiting.ts'

/** What the metrics hear of creates held through a gap (see metrics.ts). */
export type GapMetrics = {
  readonly createsResent: (reason: ResendReason, creates: number) => void
  readonly heldCreateEnded: (outcome: HeldOutcome, seconds: number) => void
}

/**
 * A gap is over once statements have gone through for this long with none failing for want of a
 * database: a statement slot that keeps failing (refused for want of connections) while another
 * gets through keeps one gap open, rather than opening and closing one a few times a second.
 */
const quietMs = 1000

/** The database's disk as the creates (and readiness' checks) found it: full since `since`. */
export type DiskFull = {
  /** PostgreSQL's own message (for the log only: never in an answer). */
  readonly message: string
  /** `performance.now()` of the first and of the last failure for want of disk space. */
  readonly since: number
  readonly lastFailure: number
}

/** The hooks `gapHooks` answers, and what it knows of the database's disk. */
export type Gaps = {
  readonly hooks: Pick<BatchHooks, 'held' | 'through' | 'heldEnded' | 'expired' | 'refused'>
  /** The disk full episode open now, if any: it ends with the first create stored again. */
  readonly diskFull: () => DiskFull | undefined
}

/**
 * The batcher's hooks that tell of gaps in the database: a gap begins with a statement that
 * fails for want of a database, held to be sent again or refused at once (a full disk, a
 * statement timeout), and ends with the first statement through after the last such failure,
 * once `quietMs` has passed with none. One log line when it begins and one when it ends (how
 * long, the creates held, the creates sent again, the creates answered 503), instead of a
 * warning per create; and the metrics of every resend and of every held create's wait. A gap in
 * which the database's disk is full says so in a line of its own, once, with PostgreSQL's
 * message, and its end says the disk has room again; meanwhile `diskFull` tells readiness.
 * `where` names the database in the lines (a Citus group's primary, as it is when the line is
 * written); `database` is how the other lines name it (host, port, database, user).
 */
export function gapHooks(
  log: Log,
  metrics: GapMetrics,
  naming: { where?: () => string; database?: string } = {},
  clock: Clock = systemClock,
): Gaps {
  const tracker = new GapTracker(log, naming, clock)
  return {
    hooks: {
      held(reason, items, first, err) {
        metrics.createsResent(reason, items)
        tracker.held(reason, items, first, err)
      },
      refused: (items, err) => tracker.refused(items, err),
      through: () => tracker.through(),
      heldEnded: metrics.heldCreateEnded,
      expired: () => tracker.expired(),
    },
    diskFull: () => tracker.diskFull(),
  }
}

/** A gap open now: since when, why, what it cost, and whether the disk is full in it. */
type Gap = {
  readonly began: number
  readonly reasons: Set<string>
  held: number
  resent: number
  unavailable: number
  lastFailure: number
  /** The first statement through since the last failure. */
  backAt: number | undefined
  /** Set once a failure said the database's disk is full. */
  disk: { message: string; since: number; lastFailure: number } | undefined
}

/** The gaps of one database, one at a time, as `gapHooks` tells of them. */
class GapTracker {
  readonly #log: Log
  readonly #clock: Clock
  readonly #naming: { where?: () => string; database?: string }
  #gap: Gap | undefined
  #stopTimer: Cancel | undefined

  constructor(log: Log, naming: { where?: () => string; database?: string }, clock: Clock) {
    this.#log = log
    this.#naming = naming
    this.#clock = clock
  }

  held(reason: ResendReason, items: number, first: number, err: unknown): void {
    const open = this.#failure(
      reason,
      err,
      'the database is unavailable: holding creates and sending them again until their deadlines',
    )
    open.held += first
    open.resent += items
  }

  refused(items: number, err: unknown): void {
    const open = this.#failure(
      undefined,
      err,
      'the database refuses creates: answering them 503 with Retry-After',
    )
    open.unavailable += items
  }

  through(): void {
    const gap = this.#gap
    if (gap === undefined || gap.backAt !== undefined) return
    gap.backAt = this.#clock.now()
    if (this.#stopTimer === undefined) this.#check()
  }

  expired(): void {
    if (this.#gap !== undefined) this.#gap.unavailable++
  }

  diskFull(): DiskFull | undefined {
    return this.#gap?.disk
  }

  /** How the lines name the database: `database` (host, port, name, user), a Citus `node`. */
  #node() {
    const { where, database } = this.#naming
    return {
      ...(database !== undefined && { database }),
      ...(where !== undefined && { node: where() }),
    }
  }

  #end(open: Gap): void {
    this.#gap = undefined
    const { began, reasons, held, resent, unavailable, disk } = open
    const backAt = open.backAt ?? this.#clock.now()
    const fields = {
      gapMs: Math.round(backAt - began),
      held,
      resent,
      unavailable,
      reasons: [...reasons].join(','),
      ...this.#node(),
    }
    if (disk !== undefined)
      this.#log.warn("the database's disk has room again: a create was stored", {
        ...fields,
        diskFullMs: Math.round(backAt - disk.since),
      })
    else this.#log.warn('the database took creates again', fields)
  }

  #check(): void {
    this.#stopTimer = undefined
    const gap = this.#gap
    if (gap?.backAt === undefined) return
    const quietFor = this.#clock.now() - gap.lastFailure
    if (quietFor >= quietMs) this.#end(gap)
    else this.#stopTimer = this.#clock.after(quietMs - quietFor, () => this.#check(), true)
  }

  /**
   * The gap open now, opened by a failure if none is: `reason`, or for a statement refused at
   * once (no resend reason), `disk_full` or `refused`.
   */
  #failure(resend: ResendReason | undefined, err: unknown, begins: string): Gap {
    const now = this.#clock.now()
    const { diskFull: diskMessage, code } = readError(err)
    const reason = resend ?? (diskMessage === undefined ? 'refused' : 'disk_full')
    let gap = this.#gap
    if (gap === undefined) {
      gap = {
        began: now,
        reasons: new Set(),
        held: 0,
        resent: 0,
        unavailable: 0,
        lastFailure: now,
        backAt: undefined,
        disk: undefined,
      }
      this.#gap = gap
      // A full disk has its own line, below.
      if (diskMessage === undefined)
        this.#log.warn(begins, {
          reason,
          code: code ?? '',
          error: describeError(err),
          ...this.#node(),
        })
    }
    gap.reasons.add(reason)
    gap.lastFailure = now
    gap.backAt = undefined
    if (diskMessage !== undefined) {
      if (gap.disk === undefined) {
        gap.disk = { message: diskMessage, since: now, lastFailure: now }
        this.#log.warn(
          "the database's disk is full: creates are answered 503 with Retry-After and /readyz says 503 until one is stored again",
          { reason: 'disk_full', code: code ?? '', postgres: diskMessage, ...this.#node() },
        )
      } else gap.disk.lastFailure = now
    }
    return gap
  }
}
