import { type Clock, earliestTimer, systemClock } from '../clock.ts'
import { outcomeOfError, type ResendReason } from '../db/reach/unavailable.ts'
import { type Fault, type Unavailable, unavailable } from '../outcome.ts'
import { createDeadlineQueue } from './deadline-queue.ts'

/**
 * How a held create ended: answered by the database after resends, unavailable (503 at its
 * deadline), or a fault (a 500: neither).
 */
export type HeldOutcome = 'answered' | 'unavailable' | 'fault'

/** How an item ends: its outcome, unavailable (503), or a fault (500). Never a rejection. */
export type Settled<O> = O | Unavailable | Fault

/** An item that waits for its outcome: queued, in a statement in flight, or held. */
export type Pending<I, O> = {
  readonly item: I
  readonly expiresAt: number
  readonly resolve: (outcome: Settled<O>) => void
  /** Answered: never sent again, and a later outcome changes nothing. */
  done: boolean
  /** When its first statement failed for want of a database (held), and why the last did. */
  heldAt?: number
  lastReason?: ResendReason
}

/** What the waiting items tell the rest of the service (the batcher's hooks of the same names). */
export type WaitingHooks = {
  /**
   * A statement failed for want of a database (`reason`, `error`): `items` of it, not yet past
   * their deadlines, wait to be sent again, `first` of them held for the first time.
   */
  readonly held?: (reason: ResendReason, items: number, first: number, error: unknown) => void
  /**
   * A held item ended `seconds` after its first statement failed: answered by the database
   * (stored, a retry, a conflict), or unavailable (503, at its deadline).
   */
  readonly heldEnded?: (outcome: HeldOutcome, seconds: number) => void
  /** An item was answered unavailable at its deadline, held or never sent. */
  readonly expired?: () => void
  /**
   * Items waiting in other batchers that share this one's `maxQueued` (an instance on a Citus
   * worker has one batcher per worker, and one limit): counted with its own queue.
   */
  readonly waitingElsewhere?: () => number
}

/** The refusal of an item past `maxQueued` waiting (503, `queue_full`). */
const queueFull = (maxQueued: number) =>
  unavailable(`more than ${maxQueued} creates are waiting`, 'queue_full')

/** The answer at a deadline: `lastReason`, if the item was held, says what it was sent again for. */
export const pastDeadline = (lastReason?: ResendReason) =>
  unavailable(
    lastReason === undefined
      ? "no answer from the database before the request's deadline"
      : `no database took the create before the request's deadline (sent again while ${lastReason.replaceAll('_', ' ')})`,
    'deadline',
  )

/**
 * The items waiting for a statement, in the order of their deadlines, and every item's one
 * answer: its outcome, or unavailable at its deadline, whether it still waits or its statement
 * is in flight (the driver may stall for seconds while it reconnects). The order is a pure
 * `DeadlineQueue`; this is its timer shell, on `clock`: one timer for all the items, waiting or
 * in flight, set at or before the earliest deadline among them and moved only when an item
 * comes with an earlier one. Deadlines come in the order of arrival, so a create sets no timer
 * of its own: the timer runs about once per deadline's length, answers what is past its
 * deadline then, and is set again for the earliest left. At most `maxQueued` wait, with those
 * of `waitingElsewhere`.
 */
export class Waiting<I, O> {
  readonly #queue = createDeadlineQueue<Pending<I, O>>()
  readonly #hooks: Required<WaitingHooks>
  /**
   * The statements in flight: their items are answered at their deadlines too. An array, not a
   * `Set`: with a `Set` added to and deleted from for every statement, each create's objects
   * outlived two young-generation collections and were promoted (about 240 bytes a create at
   * 3,345 /s, 50 with the array; test/request-gc.test.ts).
   */
  readonly #inFlight: (readonly Pending<I, O>[])[] = []
  /** The one timer: it never runs after the earliest deadline of an item not done. */
  readonly #watchUntil: (at: number) => void

  readonly #maxQueued: number
  readonly #clock: Clock

  constructor(maxQueued: number, hooks: WaitingHooks = {}, clock: Clock = systemClock) {
    this.#maxQueued = maxQueued
    this.#clock = clock
    this.#watchUntil = earliestTimer(clock, () => this.#expireDue())
    this.#hooks = {
      held: hooks.held ?? (() => {}),
      heldEnded: hooks.heldEnded ?? (() => {}),
      expired: hooks.expired ?? (() => {}),
      waitingElsewhere: hooks.waitingElsewhere ?? (() => 0),
    }
  }

  /** Items waiting for a statement (not those in flight). */
  readonly size = (): number => this.#queue.size()

  /**
   * Queues `item` by its deadline (last, unless it came after a later one); resolves with its
   * outcome, never rejects. Refused at once (unavailable, `queue_full`), never queued, when
   * `maxQueued` already wait.
   */
  add(item: I, expiresAt: number): Promise<Settled<O>> {
    // The one check of the limit on items waiting, whichever batcher of the instance they wait in.
    if (this.#queue.size() + this.#hooks.waitingElsewhere() >= this.#maxQueued)
      return Promise.resolve(queueFull(this.#maxQueued))
    return new Promise<Settled<O>>((resolve) => {
      this.#queue.insert({ item, expiresAt, resolve, done: false })
      this.#watchUntil(expiresAt)
    })
  }

  /** Takes up to `most` of the items waiting, the earliest deadlines first, for one statement. */
  take(most: number): Pending<I, O>[] {
    this.#dropExpired()
    return this.#queue.take(most)
  }

  /** Answers `p` with what the database said of it. */
  answer(p: Pending<I, O>, outcome: O): void {
    this.#end(p, outcome, 'answered')
  }

  /** Answers `p` unavailable, or as a fault, by what its statement ended with. */
  fail(p: Pending<I, O>, err: unknown): void {
    this.#refuse(p, outcomeOfError(err))
  }

  /**
   * Holds the items of a statement that failed for want of a database: those still within their
   * deadlines go back to the queue, ahead of every later item, to be sent again; the latest of
   * the queue past `maxQueued` are refused as a full queue refuses (never sent).
   */
  putBack(batch: readonly Pending<I, O>[], reason: ResendReason, err: unknown): void {
    const now = this.#clock.now()
    const again: Pending<I, O>[] = []
    let first = 0
    for (const p of batch) {
      if (p.done) continue
      if (p.expiresAt <= now) {
        this.#expire(p)
        continue
      }
      if (p.heldAt === undefined) {
        p.heldAt = now
        first++
      }
      p.lastReason = reason
      again.push(p)
    }
    this.#hooks.held(reason, again.length, first, err)
    this.#queue.merge(again)
    const room = Math.max(0, this.#maxQueued - this.#hooks.waitingElsewhere())
    for (const p of this.#queue.takeBeyond(room)) this.#refuse(p, queueFull(this.#maxQueued))
    this.#watchUntil(this.#queue.head()?.expiresAt ?? Number.POSITIVE_INFINITY)
  }

  /**
   * Answers each item of `batch`, a statement in flight, at its deadline, until `doneWith`: those
   * past it already at once, the others by the one timer.
   */
  watchInFlight(batch: readonly Pending<I, O>[]): void {
    const next = this.#expireIn(batch, this.#clock.now(), Number.POSITIVE_INFINITY)
    this.#inFlight.push(batch)
    this.#watchUntil(next)
  }

  /** Items in the statements in flight (those answered at their deadline still count). */
  inFlightItems(): number {
    let items = 0
    for (const batch of this.#inFlight) items += batch.length
    return items
  }

  /** The statement of `batch` ended: its items are answered, or back in the queue. */
  doneWith(batch: readonly Pending<I, O>[]): void {
    const at = this.#inFlight.indexOf(batch)
    if (at !== -1) this.#inFlight.splice(at, 1)
  }

  #end(p: Pending<I, O>, outcome: Settled<O>, how: HeldOutcome): void {
    if (p.done) return
    p.done = true
    if (p.heldAt !== undefined) this.#hooks.heldEnded(how, (this.#clock.now() - p.heldAt) / 1000)
    p.resolve(outcome)
  }

  #refuse(p: Pending<I, O>, outcome: Unavailable | Fault): void {
    this.#end(p, outcome, outcome.kind)
  }

  #expire(p: Pending<I, O>): void {
    if (p.done) return
    this.#hooks.expired()
    this.#refuse(p, pastDeadline(p.lastReason))
  }

  /**
   * Answers every item past its deadline, waiting or in flight, and sets the timer for the
   * earliest deadline left (a timer may run a little early: that item is then still watched).
   */
  #expireDue(): void {
    this.#dropExpired()
    const now = this.#clock.now()
    let next = this.#queue.head()?.expiresAt ?? Number.POSITIVE_INFINITY
    for (const batch of this.#inFlight) next = this.#expireIn(batch, now, next)
    this.#watchUntil(next)
  }

  /** Answers the items of `batch` past their deadlines at `now`; the earliest deadline left. */
  #expireIn(batch: readonly Pending<I, O>[], now: number, next: number): number {
    let earliest = next
    for (const p of batch) {
      if (p.done) continue
      if (p.expiresAt <= now) this.#expire(p)
      else if (p.expiresAt < earliest) earliest = p.expiresAt
    }
    return earliest
  }

  // The queue is in the order of deadlines, so the expired items lead it.
  #dropExpired(): void {
    for (const p of this.#queue.takeExpired(this.#clock.now())) this.#expire(p)
  }
}
