import { isConnectionLost, isUnavailable, translateUnavailable } from '../db/unavailable.ts'
import { DatabaseUnavailable } from '../outcome.ts'

/** How items are grouped into statements. */
export type BatchLimits = {
  /** Most items in one statement. */
  readonly maxBatch: number
  /** Most statements in flight at once; items that arrive meanwhile wait and go together. */
  readonly maxInFlight: number
  /** Most items waiting; beyond it an item is refused at once as unavailable (503). */
  readonly maxQueued: number
}

/** What the batcher tells the rest of the service. */
export type BatchHooks = {
  /** Every batch stored: its items and seconds (for the metrics). */
  readonly statementRan?: (items: number, seconds: number) => void
  /** A write of `slot` met a read-only server (25006): the connections should leave it. */
  readonly readOnly?: (slot: number) => void
  /**
   * A statement of `slot` has had no answer for `stuckAfterMs`, past every deadline of its
   * items: its connection should be cut loose, which fails the statement and frees the slot.
   */
  readonly stuck?: (slot: number) => void
  /** How long a statement may go unanswered before `stuck` (past its items' deadlines). */
  readonly stuckAfterMs?: number
  /** A statement of `slot` failed because its connection is gone: the slot should start afresh. */
  readonly connectionLost?: (slot: number) => void
}

/** Queues items and hands them to a store-a-batch function, each with its own outcome. */
export type Batcher<I, O> = {
  /**
   * Resolves with the item's outcome once its batch is stored. At `expiresAt` (a
   * `performance.now()` time) it rejects as unavailable (deadline), whether its batch is in
   * flight or not yet sent; an item not yet sent is then dropped, never sent.
   */
  readonly submit: (item: I, expiresAt?: number) => Promise<O>
  /**
   * Runs `work` on the next free slot, before any batch waiting, as the batches run: to see
   * whether statements get through now. Rejects as unavailable at `expiresAt`.
   */
  readonly probe: <T>(work: (slot: number) => Promise<T>, expiresAt: number) => Promise<T>
  /** Items waiting for a statement, statements in flight, and the oldest one's age in ms. */
  readonly load: () => { queued: number; inFlight: number; oldestMs: number }
}

type Task = { readonly run: (slot: number) => Promise<void> }

type Pending<I, O> = {
  readonly item: I
  readonly expiresAt: number
  readonly resolve: (outcome: O) => void
  readonly reject: (err: unknown) => void
}

/** The refusal of an item past `maxQueued` waiting (503, `queue_full`). */
export const queueFull = (maxQueued: number) =>
  new DatabaseUnavailable(`more than ${maxQueued} creates are waiting`, { reason: 'queue_full' })

const pastDeadline = () =>
  new DatabaseUnavailable("no answer from the database before the request's deadline", {
    reason: 'deadline',
  })

/**
 * Coalesces the items that arrive while statements are in flight into one call of `storeBatch`
 * (one statement, one commit), yet answers each item with its own outcome. A batch that fails as
 * unavailable rejects every item (its statement is one transaction: all or nothing is stored);
 * any other failure is retried one item at a time, so one bad item fails only itself.
 */
export function createBatcher<I, O>(
  // An Error among the outcomes fails that item alone (a part of the batch that was sent as a
  // statement of its own and failed, as on a Citus worker that is down).
  storeBatch: (items: readonly I[], slot: number) => Promise<(O | Error)[]>,
  limits: BatchLimits,
  {
    statementRan = () => {},
    readOnly = () => {},
    stuck = () => {},
    stuckAfterMs = Number.POSITIVE_INFINITY,
    connectionLost = () => {},
  }: BatchHooks = {},
): Batcher<I, O> {
  const queue: Pending<I, O>[] = []
  const tasks: Task[] = []
  // The free slots; a slot is one statement in flight at a time (a connection of its own).
  const free = Array.from({ length: limits.maxInFlight }, (_, i) => limits.maxInFlight - 1 - i)
  const startedAt = new Map<number, number>()
  let scheduled = false

  async function storeAlone(item: I, slot: number): Promise<O> {
    const [outcome] = await storeBatch([item], slot)
    if (outcome === undefined) throw new Error('an item got no outcome')
    if (outcome instanceof Error) throw outcome
    return outcome
  }

  // An item is answered 503 at its deadline whether it still waits or its statement is in
  // flight (the driver may stall for seconds while it reconnects): one timer for the queue's
  // oldest item and one per statement, rather than one per request.
  let queueTimer: ReturnType<typeof setTimeout> | undefined
  function watchQueue(): void {
    const head = queue[0]
    if (queueTimer !== undefined || head === undefined || head.expiresAt === Infinity) return
    queueTimer = setTimeout(() => {
      queueTimer = undefined
      dropExpired()
      watchQueue()
    }, head.expiresAt - performance.now())
  }

  // Items wait in arrival order with one deadline length, so the expired ones lead the queue.
  function dropExpired(): void {
    const now = performance.now()
    let expired = 0
    while (expired < queue.length && (queue[expired]?.expiresAt ?? now) <= now) expired++
    for (const p of queue.splice(0, expired)) p.reject(pastDeadline())
  }

  /** Answers each item of a statement in flight at its deadline; returns the stop. */
  function watchBatch(batch: readonly Pending<I, O>[]): () => void {
    let timer: ReturnType<typeof setTimeout> | undefined
    const check = () => {
      const now = performance.now()
      let next = Number.POSITIVE_INFINITY
      for (const p of batch) {
        // Rejecting an item a second time, or after its outcome, changes nothing.
        if (p.expiresAt <= now) p.reject(pastDeadline())
        else if (p.expiresAt < next) next = p.expiresAt
      }
      timer = next === Number.POSITIVE_INFINITY ? undefined : setTimeout(check, next - now)
    }
    check()
    return () => clearTimeout(timer)
  }

  /** Runs `work` on `slot`; cut loose if it has no answer for `stuckAfterMs`. */
  async function occupy(slot: number, work: () => Promise<void>): Promise<void> {
    startedAt.set(slot, performance.now())
    const timer =
      stuckAfterMs === Number.POSITIVE_INFINITY ? undefined : setTimeout(stuck, stuckAfterMs, slot)
    try {
      await work()
    } finally {
      clearTimeout(timer)
      startedAt.delete(slot)
      free.push(slot)
      schedule()
    }
  }

  async function run(batch: Pending<I, O>[], slot: number): Promise<void> {
    const started = performance.now()
    const stopWatching = watchBatch(batch)
    try {
      const outcomes = await storeBatch(
        batch.map((p) => p.item),
        slot,
      )
      statementRan(batch.length, (performance.now() - started) / 1000)
      batch.forEach((p, i) => {
        const outcome = outcomes[i]
        if (outcome instanceof Error) p.reject(outcome)
        else if (outcome) p.resolve(outcome)
        else p.reject(new Error('an item got no outcome'))
      })
    } catch (err) {
      if (isUnavailable(err) || batch.length === 1) {
        if ((err as { code?: unknown }).code === '25006') readOnly(slot)
        if (isConnectionLost(err)) connectionLost(slot)
        for (const p of batch) p.reject(err)
        return
      }
      await Promise.all(batch.map((p) => storeAlone(p.item, slot).then(p.resolve, p.reject)))
    } finally {
      stopWatching()
    }
  }

  function flush(): void {
    scheduled = false
    dropExpired()
    while (free.length > 0 && (tasks.length > 0 || queue.length > 0)) {
      const slot = free.pop() as number
      const task = tasks.shift()
      if (task !== undefined) void occupy(slot, () => task.run(slot))
      else {
        const batch = queue.splice(0, limits.maxBatch)
        void occupy(slot, () => run(batch, slot))
      }
    }
    watchQueue()
  }

  // Flushing after the current I/O phase lets the items parsed in it share one statement.
  function schedule(): void {
    if (!scheduled && (queue.length > 0 || tasks.length > 0) && free.length > 0) {
      scheduled = true
      setImmediate(flush)
    }
  }

  function oldestMs(): number {
    const now = performance.now()
    let oldest = 0
    for (const at of startedAt.values()) oldest = Math.max(oldest, now - at)
    return oldest
  }

  function probe<T>(work: (slot: number) => Promise<T>, expiresAt: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      // At the deadline: dropped if still waiting for a slot, answered either way.
      const timer = setTimeout(
        () => {
          const at = tasks.indexOf(task)
          if (at >= 0) tasks.splice(at, 1)
          reject(pastDeadline())
        },
        Math.max(0, expiresAt - performance.now()),
      )
      const task: Task = {
        async run(slot) {
          try {
            resolve(await work(slot))
          } catch (err) {
            if (isConnectionLost(err)) connectionLost(slot)
            reject(err)
          } finally {
            clearTimeout(timer)
          }
        },
      }
      tasks.push(task)
      schedule()
    }).catch(translateUnavailable)
  }

  function submit(item: I, expiresAt = Number.POSITIVE_INFINITY): Promise<O> {
    if (queue.length >= limits.maxQueued) return Promise.reject(queueFull(limits.maxQueued))
    return new Promise<O>((resolve, reject) => {
      queue.push({ item, expiresAt, resolve, reject })
      schedule()
      watchQueue()
    }).catch(translateUnavailable)
  }

  return Object.freeze({
    submit,
    probe,
    load: () => ({
      queued: queue.length,
      inFlight: limits.maxInFlight - free.length,
      oldestMs: oldestMs(),
    }),
  })
}
