import type { Sql } from 'postgres'
import type { StatementSlot } from '../db/reach/slots.ts'
import {
  isConnectionLost,
  isUnavailable,
  type ResendReason,
  resendReason,
  translateUnavailable,
} from '../db/reach/unavailable.ts'
import { limits as contractLimits } from '../limits.ts'
import { DatabaseUnavailable } from '../outcome.ts'
import { type BatchPath, type CreateOutcome, type NewRow, storeBatch } from './batch-sql.ts'
import type { NewPlant } from './schema.ts'

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
  /**
   * A statement failed for want of a database (`reason`, `error`): `items` of it, not yet past
   * their deadlines, wait to be sent again, `first` of them held for the first time.
   */
  readonly held?: (reason: ResendReason, items: number, first: number, error: unknown) => void
  /** A statement went through with nothing of it failing for want of a database. */
  readonly through?: () => void
  /**
   * A held item ended `seconds` after its first statement failed: answered by the database
   * (stored, a retry, a conflict), or unavailable (503, at its deadline).
   */
  readonly heldEnded?: (outcome: 'answered' | 'unavailable', seconds: number) => void
  /** An item was answered unavailable at its deadline, held or never sent. */
  readonly expired?: () => void
  /**
   * Items waiting in other batchers that share this one's `maxQueued` (an instance on a Citus
   * worker has one batcher per worker, and one limit): counted with its own queue.
   */
  readonly waitingElsewhere?: () => number
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
  /** Answered: never sent again, and a later outcome changes nothing. */
  done: boolean
  /** When its first statement failed for want of a database (held), and why the last did. */
  heldAt?: number
  lastReason?: ResendReason
}

/** The refusal of an item past `maxQueued` waiting (503, `queue_full`). */
const queueFull = (maxQueued: number) =>
  new DatabaseUnavailable(`more than ${maxQueued} creates are waiting`, { reason: 'queue_full' })

const pastDeadline = (lastReason?: ResendReason) =>
  new DatabaseUnavailable(
    lastReason === undefined
      ? "no answer from the database before the request's deadline"
      : `no database took the create before the request's deadline (sent again while ${lastReason.replaceAll('_', ' ')})`,
    { reason: 'deadline' },
  )

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Coalesces the items that arrive while statements are in flight into one call of `storeBatch`
 * (one statement, one commit), yet answers each item with its own outcome. A batch that fails
 * for want of a database (`resendReason`: the connection refused or lost, the server restarting
 * or read-only) is held: its items go back to the head of the queue and are sent again, on the
 * slot's next connection, until their deadlines; its slot pauses a moment first (doubling, up to
 * `limits.database.resendPause.most`). That is safe because an item's outcome is decided by what
 * the table holds (the id is the idempotency key): a batch whose commit's outcome is unknown is
 * sent again as it is. A batch that fails otherwise as unavailable rejects every item (its
 * statement is one transaction: all or nothing is stored); any other failure is retried one item
 * at a time, so one bad item fails only itself.
 */
export function createBatcher<I, O>(
  // An Error among the outcomes fails that item alone (a part of the batch that was sent as a
  // statement of its own and failed, as on a Citus worker that is down); one that is worth
  // sending again holds it.
  storeBatch: (items: readonly I[], slot: number) => Promise<(O | Error)[]>,
  limits: BatchLimits,
  {
    statementRan = () => {},
    readOnly = () => {},
    stuck = () => {},
    stuckAfterMs = Number.POSITIVE_INFINITY,
    connectionLost = () => {},
    held = () => {},
    through = () => {},
    heldEnded = () => {},
    expired = () => {},
    waitingElsewhere = () => 0,
  }: BatchHooks = {},
): Batcher<I, O> {
  // Waiting items, in the order of their deadlines.
  const queue: Pending<I, O>[] = []
  const tasks: Task[] = []
  // The free slots; a slot is one statement in flight at a time (a connection of its own).
  const free = Array.from({ length: limits.maxInFlight }, (_, i) => limits.maxInFlight - 1 - i)
  const startedAt = new Map<number, number>()
  // Statements in a row of each slot that failed for want of a database: its next pause.
  const failedInARow = new Map<number, number>()
  const { first: firstPause, most: mostPause } = contractLimits.database.resendPause
  let scheduled = false

  function answer(p: Pending<I, O>, outcome: O): void {
    if (p.done) return
    p.done = true
    if (p.heldAt !== undefined) heldEnded('answered', (performance.now() - p.heldAt) / 1000)
    p.resolve(outcome)
  }

  function fail(p: Pending<I, O>, err: unknown): void {
    if (p.done) return
    p.done = true
    if (p.heldAt !== undefined)
      heldEnded(
        isUnavailable(err) ? 'unavailable' : 'answered',
        (performance.now() - p.heldAt) / 1000,
      )
    p.reject(err)
  }

  function expire(p: Pending<I, O>): void {
    if (p.done) return
    expired()
    fail(p, pastDeadline(p.lastReason))
  }

  /** Puts `p` in the queue by its deadline: last, unless it came after a later one. */
  function enqueue(p: Pending<I, O>): void {
    let at = queue.length
    while (at > 0 && (queue[at - 1]?.expiresAt ?? 0) > p.expiresAt) at--
    queue.splice(at, 0, p)
    // A new head has an earlier deadline than the one watched.
    if (at === 0) rewatchQueue()
  }

  /**
   * Holds the items of a statement that failed for want of a database: those still within their
   * deadlines go back to the queue, ahead of every later item, to be sent again.
   */
  function hold(batch: readonly Pending<I, O>[], reason: ResendReason, err: unknown): void {
    const now = performance.now()
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
    // One merge of the two lists in deadline order, rather than an insertion each.
    again.sort((a, b) => a.expiresAt - b.expiresAt)
    const merged: Pending<I, O>[] = []
    let i = 0
    for (const q of queue) {
      for (let p = again[i]; p !== undefined && p.expiresAt <= q.expiresAt; p = again[++i])
        merged.push(p)
      merged.push(q)
    }
    for (let p = again[i]; p !== undefined; p = again[++i]) merged.push(p)
    queue.length = 0
    for (const p of merged) queue.push(p)
    // The held go ahead of the rest; the latest of those, past the limit, are refused as a full
    // queue refuses (never sent), so that no more than `maxQueued` ever wait.
    const room = Math.max(0, limits.maxQueued - waitingElsewhere())
    for (const p of queue.splice(room)) fail(p, queueFull(limits.maxQueued))
    rewatchQueue()
  }

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
    queueTimer = setTimeout(
      () => {
        queueTimer = undefined
        dropExpired()
        watchQueue()
      },
      Math.max(0, head.expiresAt - performance.now()),
    )
  }

  /** Watches the queue's head afresh: it changed to one with an earlier deadline. */
  function rewatchQueue(): void {
    clearTimeout(queueTimer)
    queueTimer = undefined
    watchQueue()
  }

  // The queue is in the order of deadlines, so the expired items lead it.
  function dropExpired(): void {
    const now = performance.now()
    let count = 0
    while (count < queue.length && (queue[count]?.expiresAt ?? now) <= now) count++
    for (const p of queue.splice(0, count)) expire(p)
  }

  /** Answers each item of a statement in flight at its deadline; returns the stop. */
  function watchBatch(batch: readonly Pending<I, O>[]): () => void {
    let timer: ReturnType<typeof setTimeout> | undefined
    const check = () => {
      const now = performance.now()
      let next = Number.POSITIVE_INFINITY
      for (const p of batch) {
        if (p.done) continue
        if (p.expiresAt <= now) expire(p)
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

  /** How long `slot` waits after a statement failed for want of a database: doubling. */
  function pauseAfterFailure(slot: number): number {
    const inARow = failedInARow.get(slot) ?? 0
    failedInARow.set(slot, inARow + 1)
    return Math.min(firstPause * 2 ** inARow, mostPause)
  }

  async function run(batch: Pending<I, O>[], slot: number): Promise<void> {
    const started = performance.now()
    const stopWatching = watchBatch(batch)
    let pause = 0
    try {
      const outcomes = await storeBatch(
        batch.map((p) => p.item),
        slot,
      )
      statementRan(batch.length, (performance.now() - started) / 1000)
      const again: Pending<I, O>[] = []
      let why: { reason: ResendReason; err: Error } | undefined
      batch.forEach((p, i) => {
        const outcome = outcomes[i]
        const reason = outcome instanceof Error ? resendReason(outcome) : undefined
        if (reason !== undefined) {
          again.push(p)
          why ??= { reason, err: outcome as Error }
        } else if (outcome instanceof Error) fail(p, outcome)
        else if (outcome !== undefined) answer(p, outcome)
        else fail(p, new Error('an item got no outcome'))
      })
      if (why === undefined) {
        failedInARow.delete(slot)
        through()
      } else {
        hold(again, why.reason, why.err)
        pause = pauseAfterFailure(slot)
      }
    } catch (err) {
      if ((err as { code?: unknown }).code === '25006') readOnly(slot)
      if (isConnectionLost(err)) connectionLost(slot)
      const reason = resendReason(err)
      if (reason !== undefined) {
        hold(batch, reason, err)
        pause = pauseAfterFailure(slot)
        return
      }
      if (isUnavailable(err) || batch.length === 1) {
        for (const p of batch) fail(p, err)
        return
      }
      await Promise.all(
        batch.map((p) =>
          storeAlone(p.item, slot).then(
            (outcome) => answer(p, outcome),
            (e: unknown) => fail(p, e),
          ),
        ),
      )
    } finally {
      stopWatching()
      // The slot takes nothing more for a moment: its connection is being opened again, or the
      // server is still away; the items held may go out on another slot meanwhile.
      if (pause > 0) await sleep(pause)
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
    // The one check of the limit on items waiting, whichever batcher of the instance they wait in.
    if (queue.length + waitingElsewhere() >= limits.maxQueued)
      return Promise.reject(queueFull(limits.maxQueued))
    return new Promise<O>((resolve, reject) => {
      enqueue({ item, expiresAt, resolve, reject, done: false })
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

/** What `batchOnSlots` hears besides the batcher's hooks it answers itself. */
export type SlotHooks = Omit<
  BatchHooks,
  'stuck' | 'stuckAfterMs' | 'readOnly' | 'connectionLost'
> & {
  /** A write met a read-only server (25006) through `sql`, which is still connected to it. */
  readonly readOnly?: (sql: Sql) => void
  /** A slot's connection was cut loose: no answer for `ms`. */
  readonly cutLoose?: (slot: number, ms: number, sockets: number) => void
}

/**
 * Creates batched onto statement slots: the creates that arrive while statements are in flight
 * are coalesced into one batch (one commit for all of them), yet each gets its own outcome:
 * created, retry or conflict. Each statement in flight has a slot, a connection of its own; one
 * with no answer past the request deadline (a partition: nothing will come until the kernel
 * gives up, minutes later) is cut loose, and the slot reconnects; one whose connection was lost
 * starts again with a new pool, so that nothing the driver kept of the old one outlives it.
 * `path` says how a batch is sent, read once for each batch.
 */
export function batchOnSlots(
  slots: readonly StatementSlot[],
  limits: BatchLimits,
  path: () => BatchPath,
  { cutLoose = () => {}, readOnly = () => {}, ...hooks }: SlotHooks = {},
) {
  if (slots.length < limits.maxInFlight)
    throw new Error(`${limits.maxInFlight} statements in flight need as many slots`)
  const slotSql = (slot: number): Sql => {
    const s = slots[slot]
    if (s === undefined) throw new Error(`no statement slot ${slot}`)
    return s.sql
  }
  const stuckAfterMs = contractLimits.database.cutLoose
  const batcher = createBatcher(
    (batch: readonly NewRow[], slot: number) => storeBatch(slotSql(slot), batch, path()),
    limits,
    {
      ...hooks,
      readOnly: (slot) => readOnly(slotSql(slot)),
      stuckAfterMs,
      stuck(slot) {
        const reason = new DatabaseUnavailable(
          `no answer from the database for ${stuckAfterMs} ms; the connection was closed`,
        )
        const sockets = slots[slot]?.cut(Object.assign(reason, { code: 'ETIMEDOUT' })) ?? 0
        cutLoose(slot, stuckAfterMs, sockets)
      },
      connectionLost(slot) {
        slots[slot]?.cut(new DatabaseUnavailable('the connection was lost'))
      },
    },
  )
  return Object.freeze({
    create: (plant: NewPlant, createdBy: string, expiresAt?: number): Promise<CreateOutcome> =>
      batcher.submit({ plant, createdBy }, expiresAt),
    probe: <T>(work: (sql: Sql) => Promise<T>, expiresAt: number): Promise<T> =>
      batcher.probe((slot) => work(slotSql(slot)), expiresAt),
    load: batcher.load,
  })
}
