import { type Cancel, type Clock, systemClock } from '../clock.ts'
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
 * `DeadlineQueue`; this is its timer shell, on `clock`: one timer watches the queue's oldest
 * item and one each statement in flight, rather than one per item. At most `maxQueued` wait,
 * with those of `waitingElsewhere`.
 */
export function createWaiting<I, O>(
  maxQueued: number,
  {
    held = () => {},
    heldEnded = () => {},
    expired = () => {},
    waitingElsewhere = () => 0,
  }: WaitingHooks = {},
  clock: Clock = systemClock,
) {
  const queue = createDeadlineQueue<Pending<I, O>>()
  let stopWatching: Cancel | undefined
  let watchedAt = Number.POSITIVE_INFINITY

  function end(p: Pending<I, O>, outcome: Settled<O>, how: HeldOutcome): void {
    if (p.done) return
    p.done = true
    if (p.heldAt !== undefined) heldEnded(how, (clock.now() - p.heldAt) / 1000)
    p.resolve(outcome)
  }

  /** Answers `p` with what the database said of it. */
  function answer(p: Pending<I, O>, outcome: O): void {
    end(p, outcome, 'answered')
  }

  /** Answers `p` unavailable, or as a fault, by what its statement ended with. */
  function fail(p: Pending<I, O>, err: unknown): void {
    refuse(p, outcomeOfError(err))
  }

  function refuse(p: Pending<I, O>, outcome: Unavailable | Fault): void {
    end(p, outcome, outcome.kind)
  }

  function expire(p: Pending<I, O>): void {
    if (p.done) return
    expired()
    refuse(p, pastDeadline(p.lastReason))
  }

  /** Watches the queue's head: a timer at its deadline, moved when the head changes. */
  function watchQueue(): void {
    const at = queue.head()?.expiresAt ?? Number.POSITIVE_INFINITY
    if (at === watchedAt) return
    stopWatching?.()
    stopWatching = undefined
    watchedAt = at
    if (at === Number.POSITIVE_INFINITY) return
    stopWatching = clock.after(at - clock.now(), () => {
      stopWatching = undefined
      watchedAt = Number.POSITIVE_INFINITY
      dropExpired()
      watchQueue()
    })
  }

  // The queue is in the order of deadlines, so the expired items lead it.
  function dropExpired(): void {
    for (const p of queue.takeExpired(clock.now())) expire(p)
  }

  /**
   * Queues `item` by its deadline (last, unless it came after a later one); resolves with its
   * outcome, never rejects. Refused at once (unavailable, `queue_full`), never queued, when
   * `maxQueued` already wait.
   */
  function add(item: I, expiresAt: number): Promise<Settled<O>> {
    // The one check of the limit on items waiting, whichever batcher of the instance they wait in.
    if (queue.size() + waitingElsewhere() >= maxQueued) return Promise.resolve(queueFull(maxQueued))
    return new Promise<Settled<O>>((resolve) => {
      queue.insert({ item, expiresAt, resolve, done: false })
      watchQueue()
    })
  }

  /** Takes up to `most` of the items waiting, the earliest deadlines first, for one statement. */
  function take(most: number): Pending<I, O>[] {
    dropExpired()
    const batch = queue.take(most)
    watchQueue()
    return batch
  }

  /**
   * Holds the items of a statement that failed for want of a database: those still within their
   * deadlines go back to the queue, ahead of every later item, to be sent again; the latest of
   * the queue past `maxQueued` are refused as a full queue refuses (never sent).
   */
  function putBack(batch: readonly Pending<I, O>[], reason: ResendReason, err: unknown): void {
    const now = clock.now()
    const again: Pending<I, O>[] = []
    let first = 0
    for (const p of batch) {
      if (p.done) continue
      if (p.expiresAt <= now) {
        expire(p)
        continue
      }
      if (p.heldAt === undefined) {
        p.heldAt = now
        first++
      }
      p.lastReason = reason
      again.push(p)
    }
    held(reason, again.length, first, err)
    queue.merge(again)
    const room = Math.max(0, maxQueued - waitingElsewhere())
    for (const p of queue.takeBeyond(room)) refuse(p, queueFull(maxQueued))
    watchQueue()
  }

  /** Answers each item of a statement in flight at its deadline; returns the stop. */
  function watchInFlight(batch: readonly Pending<I, O>[]): () => void {
    let stop: Cancel | undefined
    const check = () => {
      const now = clock.now()
      let next = Number.POSITIVE_INFINITY
      for (const p of batch) {
        if (p.done) continue
        if (p.expiresAt <= now) expire(p)
        else if (p.expiresAt < next) next = p.expiresAt
      }
      stop = next === Number.POSITIVE_INFINITY ? undefined : clock.after(next - now, check)
    }
    check()
    return () => stop?.()
  }

  return Object.freeze({
    add,
    take,
    putBack,
    watchInFlight,
    answer,
    fail,
    /** Items waiting for a statement (not those in flight). */
    size: queue.size,
  })
}
