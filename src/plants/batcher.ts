import { type Clock, earliestTimer, sleepOn, systemClock } from '../clock.ts'
import { type ResendReason, readError, translateUnavailable } from '../db/reach/unavailable.ts'
import { limits as contractLimits } from '../limits.ts'
import { DatabaseUnavailable } from '../outcome.ts'
import { type Pending, pastDeadline, type Settled, Waiting, type WaitingHooks } from './waiting.ts'

/** How items are grouped into statements. */
export type BatchLimits = {
  /** Most items in one statement. */
  readonly maxBatch: number
  /**
   * Most statements in flight at once. An item goes at once when none is; while one is, the
   * items waiting go on a free slot once they are as many as the statements in flight hold.
   */
  readonly maxInFlight: number
  /** Most items waiting; beyond it an item is refused at once as unavailable (503). */
  readonly maxQueued: number
}

/** What the batcher tells the rest of the service. */
export type BatchHooks = WaitingHooks & {
  /** Every batch stored: its items and seconds (for the metrics). */
  readonly statementRan?: (items: number, seconds: number) => void
  /** A write of `slot` met a read-only server (25006): the connections should leave it. */
  readonly readOnly?: (slot: number) => void
  /**
   * A statement of `slot` has had no answer for `stuckAfterMs`, past every deadline of its
   * items, or for `silentAfterMs` and more with `silent` saying so: its connection should be cut
   * loose, which fails the statement and frees the slot. `ms`: how long it had run, or
   * `stuckAfterMs` itself for the first reason.
   */
  readonly stuck?: (slot: number, why: { ms: number; unacknowledged: boolean }) => void
  /** How long a statement may go unanswered before `stuck` (past its items' deadlines). */
  readonly stuckAfterMs?: number
  /**
   * Asked of a statement unanswered for `silentAfterMs`, and again every `silentEveryMs` while
   * it stays so (one question at a time): whether nothing sent on its connection has reached the
   * server. True: `stuck` at once.
   */
  readonly silent?: (slot: number) => Promise<boolean>
  readonly silentAfterMs?: number
  /** A statement of `slot` failed because its connection is gone: the slot should start afresh. */
  readonly connectionLost?: (slot: number) => void
  /** A statement went through with nothing of it failing for want of a database. */
  readonly through?: () => void
  /**
   * `items` failed for want of a database in a way not worth sending again (a full disk, a
   * statement timeout, out of memory): answered unavailable (503) at once.
   */
  readonly refused?: (items: number, error: unknown) => void
  /**
   * Code of ours that runs after a statement (a hook) threw, after every item of it was
   * answered: a bug, to be logged; the answers stand.
   */
  readonly fault?: (error: unknown) => void
}

/** Queues items and hands them to a store-a-batch function, each with its own outcome. */
export type Batcher<I, O> = {
  /**
   * Resolves with the item's outcome once its batch is stored; never rejects. At `expiresAt` (a
   * time on its clock) it resolves unavailable (deadline), whether its batch is in flight or not
   * yet sent; an item not yet sent is then dropped, never sent. An item that failed otherwise is
   * unavailable or a fault, by what it failed with.
   */
  readonly submit: (item: I, expiresAt?: number) => Promise<Settled<O>>
  /**
   * Runs `work` on the next free slot, before any batch waiting, as the batches run: to see
   * whether statements get through now. Rejects as unavailable at `expiresAt`.
   */
  readonly probe: <T>(work: (slot: number) => Promise<T>, expiresAt: number) => Promise<T>
  /** Items waiting for a statement, statements in flight, and the oldest one's age in ms. */
  readonly load: () => { queued: number; inFlight: number; oldestMs: number }
  /** Items waiting for a statement (what `load` counts as `queued`, without the rest). */
  readonly queued: () => number
}

type Task = { readonly run: (slot: number) => Promise<void> }

/** What watches the statements in flight (`BatchHooks`). */
type Watch = {
  readonly stuck: NonNullable<BatchHooks['stuck']>
  readonly stuckAfterMs: number
  readonly silent: BatchHooks['silent']
  readonly silentAfterMs: number
}

/** How often a statement unanswered past `silentAfterMs` is asked about again. */
const silentEveryMs = 250

/**
 * The statement slots of a batcher: which are free, since when each busy one runs (`stuck` when
 * one has run `stuckAfterMs`, or from `silentAfterMs` on when `silent` says so, once a
 * statement), and each one's pause after statements in a row
 * that failed for want of a database (doubling from `limits.database.resendPause.first` up to its
 * `most`). One timer watches every busy slot, set for the earliest statement still unreported
 * and left to run out rather than cancelled: a statement sets no timer of its own.
 * `freed` hears of each slot given back after its work; `freedAtOnce` of one its work released
 * sooner.
 */
function slotPool(
  count: number,
  clock: Clock,
  { stuck, stuckAfterMs, silent, silentAfterMs }: Watch,
  freed: () => void,
  freedAtOnce: () => void,
) {
  const free = Array.from({ length: count }, (_, i) => count - 1 - i)
  // When each busy slot's statement started (`clock.now()`), NaN while the slot is free. Not a
  // Map: a Map that empties rehashes into a new table, and once its table is in the old
  // generation V8 makes each new one there too: about 170 bytes of the old generation a
  // statement, which brought a full collection every minute or two at 10 % of the peak
  // (BENCHMARKS.md, "A Map emptied at each statement").
  const startedAt = new Float64Array(count).fill(Number.NaN)
  // The busy slots whose statement has been reported stuck.
  const reported = new Set<number>()
  // The busy slots `silent` is being asked about.
  const asking = new Set<number>()
  const firstCheck = silent === undefined ? stuckAfterMs : Math.min(silentAfterMs, stuckAfterMs)
  const failedInARow = new Map<number, number>()
  const { first, most } = contractLimits.database.resendPause
  const watchUntil = earliestTimer(clock, checkStuck)
  function checkStuck(): void {
    const now = clock.now()
    let next = Number.POSITIVE_INFINITY
    for (let slot = 0; slot < count; slot++) {
      const at = startedAt[slot] ?? Number.NaN
      if (Number.isNaN(at) || reported.has(slot)) continue
      if (now - at >= stuckAfterMs) {
        reported.add(slot)
        stuck(slot, { ms: stuckAfterMs, unacknowledged: false })
        continue
      }
      next = Math.min(next, at + stuckAfterMs)
      if (silent === undefined) continue
      if (now - at < silentAfterMs) {
        next = Math.min(next, at + silentAfterMs)
        continue
      }
      next = Math.min(next, now + silentEveryMs)
      if (asking.has(slot)) continue
      asking.add(slot)
      silent(slot).then(
        (yes) => {
          asking.delete(slot)
          // Still the same statement, not yet reported.
          if (!yes || startedAt[slot] !== at || reported.has(slot)) return
          reported.add(slot)
          stuck(slot, { ms: clock.now() - at, unacknowledged: true })
        },
        () => asking.delete(slot),
      )
    }
    watchUntil(next)
  }
  /** `slot` is free again: no longer watched, and taken next. */
  function giveBack(slot: number): void {
    startedAt[slot] = Number.NaN
    reported.delete(slot)
    free.push(slot)
  }
  return {
    hasFree: () => free.length > 0,
    take: () => free.pop() as number,
    inFlight: () => count - free.length,
    /**
     * Runs `work` on `slot`, then gives the slot back (`freed`); `stuck` if it runs
     * `stuckAfterMs`. `work` may give it back sooner by calling its `release`, once its
     * statement has ended: `freedAtOnce` then runs at once, in that call.
     */
    async occupy(slot: number, work: (release: () => void) => Promise<void>): Promise<void> {
      const now = clock.now()
      startedAt[slot] = now
      if (firstCheck !== Number.POSITIVE_INFINITY) watchUntil(now + firstCheck)
      // No named closure here: tsx names each one as it is made (esbuild's keepNames), a
      // defineProperty for every statement.
      let released = false
      try {
        await work(() => {
          if (released) return
          released = true
          giveBack(slot)
          freedAtOnce()
        })
      } finally {
        if (!released) {
          released = true
          giveBack(slot)
          freed()
        }
      }
    },
    /** How long `slot` waits after a statement failed for want of a database: doubling. */
    pauseAfterFailure(slot: number): number {
      const inARow = failedInARow.get(slot) ?? 0
      failedInARow.set(slot, inARow + 1)
      return Math.min(first * 2 ** inARow, most)
    },
    /** A statement of `slot` went through: its next failure pauses it the least. */
    through: (slot: number) => void failedInARow.delete(slot),
    /** How long the oldest statement in flight has run, in ms. */
    oldestMs(): number {
      const now = clock.now()
      let oldest = 0
      for (const at of startedAt) if (!Number.isNaN(at)) oldest = Math.max(oldest, now - at)
      return oldest
    },
  }
}

/** What answering a statement's items needs: the queue, the hooks, the slots, a lone resend. */
type Answering<I, O> = {
  readonly waiting: Waiting<I, O>
  readonly hooks: Required<Omit<BatchHooks, keyof WaitingHooks | keyof Watch>>
  readonly pool: ReturnType<typeof slotPool>
  readonly storeAlone: (item: I, slot: number) => Promise<O>
}

/**
 * Answers each item of a statement that ran by its outcome, then tells the hooks; returns the
 * slot's pause. Nothing here can make a committed batch a failure: a hook that throws does so
 * after every item is answered.
 */
function settle<I, O>(
  { waiting, hooks, pool }: Answering<I, O>,
  batch: Pending<I, O>[],
  slot: number,
  outcomes: (O | Error)[],
): number {
  const again: Pending<I, O>[] = []
  let why: { reason: ResendReason; err: Error } | undefined
  let refusal: Error | undefined
  let refusedItems = 0
  batch.forEach((p, i) => {
    const outcome = outcomes[i]
    const read = outcome instanceof Error ? readError(outcome) : undefined
    const reason = read?.resend
    if (reason !== undefined) {
      again.push(p)
      why ??= { reason, err: outcome as Error }
    } else if (outcome instanceof Error) {
      if (read?.unavailable) {
        refusal ??= outcome
        refusedItems++
      }
      waiting.fail(p, outcome)
    } else if (outcome !== undefined) waiting.answer(p, outcome)
    else waiting.fail(p, new Error('an item got no outcome'))
  })
  if (why !== undefined) waiting.putBack(again, why.reason, why.err)
  // The hooks last: every item is answered or held again before any of them runs.
  if (refusal !== undefined) hooks.refused(refusedItems, refusal)
  if (why === undefined && refusal === undefined) {
    pool.through(slot)
    hooks.through()
    return 0
  }
  return why === undefined ? 0 : pool.pauseAfterFailure(slot)
}

/**
 * A statement that failed as a whole: held, refused, or its items tried one at a time; the
 * hooks last, once every item is answered or held again, so that one that throws (reported as
 * a fault) leaves none unanswered. Returns the slot's pause.
 */
async function statementFailed<I, O>(
  { waiting, hooks, pool, storeAlone }: Answering<I, O>,
  batch: Pending<I, O>[],
  slot: number,
  err: unknown,
): Promise<number> {
  const read = readError(err)
  const { resend: reason, unavailable } = read
  let pause = 0
  if (reason !== undefined) {
    waiting.putBack(batch, reason, err)
    pause = pool.pauseAfterFailure(slot)
  } else if (unavailable || batch.length === 1) {
    for (const p of batch) waiting.fail(p, err)
  } else {
    await Promise.all(
      batch.map((p) =>
        storeAlone(p.item, slot).then(
          (outcome) => waiting.answer(p, outcome),
          (e: unknown) => waiting.fail(p, e),
        ),
      ),
    )
  }
  try {
    if (read.readOnly) hooks.readOnly(slot)
    if (read.connectionLost) hooks.connectionLost(slot)
    if (reason === undefined && unavailable) hooks.refused(batch.length, err)
  } catch (hookErr) {
    hooks.fault(hookErr)
  }
  return pause
}

/**
 * Runs one statement of `batch` on `slot` and answers its items (`settle`, or `statementFailed`
 * for a statement that failed as a whole); the slot then pauses, if the statement failed for
 * want of a database.
 */
async function runStatement<I, O>(
  answering: Answering<I, O>,
  storeBatch: (items: readonly I[], slot: number) => Promise<(O | Error)[]>,
  clock: Clock,
  batch: Pending<I, O>[],
  slot: number,
  release: () => void,
): Promise<void> {
  const { waiting, hooks } = answering
  const started = clock.now()
  waiting.watchInFlight(batch)
  let pause = 0
  try {
    let outcomes: (O | Error)[]
    try {
      outcomes = await storeBatch(
        batch.map((p) => p.item),
        slot,
      )
    } catch (err) {
      pause = await statementFailed(answering, batch, slot, err)
      return
    }
    // Past the statement: its connection is free. When every item has its outcome and as many
    // wait as it held, the slot takes the next batch before these items are answered, so that
    // the database works on it while this process writes the answers (BENCHMARKS.md, "A slot
    // handed on before the answers"); fewer wait for the loop's turn, to go with more.
    if (waiting.size() >= batch.length && !outcomes.some((o) => o instanceof Error)) {
      waiting.doneWith(batch)
      release()
    }
    // What follows answers its items, whatever a hook does after.
    pause = settle(answering, batch, slot, outcomes)
    hooks.statementRan(batch.length, (clock.now() - started) / 1000)
  } catch (err) {
    // A fault of our own after the items were answered (a hook that threw): reported, and the
    // answers stand.
    hooks.fault(err)
  } finally {
    waiting.doneWith(batch)
    // The slot takes nothing more for a moment: its connection is being opened again, or the
    // server is still away; the items held may go out on another slot meanwhile.
    if (pause > 0) await sleepOn(clock, pause)
  }
}

/**
 * Queues `work` as a task that runs on the next free slot, before any batch waiting; rejects as
 * unavailable (deadline) at `expiresAt`, a task still waiting for a slot then dropped.
 */
function probeOn<T>(
  tasks: Task[],
  schedule: () => void,
  clock: Clock,
  connectionLost: (slot: number) => void,
  work: (slot: number) => Promise<T>,
  expiresAt: number,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const stopTimer = clock.after(expiresAt - clock.now(), () => {
      const at = tasks.indexOf(task)
      if (at >= 0) tasks.splice(at, 1)
      const late = pastDeadline()
      reject(new DatabaseUnavailable(late.detail, { reason: late.reason }))
    })
    const task: Task = {
      async run(slot) {
        try {
          resolve(await work(slot))
        } catch (err) {
          if (readError(err).connectionLost) connectionLost(slot)
          reject(err)
        } finally {
          stopTimer()
        }
      },
    }
    tasks.push(task)
    schedule()
  }).catch(translateUnavailable)
}

/**
 * Coalesces the items that arrive while statements are in flight into one call of `storeBatch`
 * (one statement, one commit), yet answers each item with its own outcome. A batch that fails
 * for want of a database (`readError`'s resend reason: the connection refused or lost, the
 * server restarting or read-only) is held: its items go back to the head of the queue and are
 * sent again, on the slot's next connection, until their deadlines; its slot pauses a moment
 * first (`slotPool`). That is safe because an item's outcome is decided by what the table holds
 * (the id is the idempotency key): a batch whose commit's outcome is unknown is sent again as it
 * is. A batch that fails otherwise as unavailable answers every item unavailable (its statement
 * is one transaction: all or nothing is stored); any other failure is retried one item at a
 * time, so one bad item fails only itself. The items' queue and deadlines are `Waiting`'s;
 * this runs the statements on slots.
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
    silent,
    silentAfterMs = Number.POSITIVE_INFINITY,
    connectionLost = () => {},
    through = () => {},
    refused = () => {},
    fault = (err: unknown) => {
      throw err
    },
    ...waitingHooks
  }: BatchHooks = {},
  clock: Clock = systemClock,
): Batcher<I, O> {
  const waiting = new Waiting<I, O>(limits.maxQueued, waitingHooks, clock)
  const tasks: Task[] = []
  // A slot is one statement in flight at a time (a connection of its own).
  const pool = slotPool(
    limits.maxInFlight,
    clock,
    { stuck, stuckAfterMs, silent, silentAfterMs },
    () => schedule(),
    () => flush(),
  )
  const hooks = {
    statementRan,
    readOnly,
    connectionLost,
    through,
    refused,
    fault,
  }
  const answering: Answering<I, O> = {
    waiting,
    hooks,
    pool,
    async storeAlone(item, slot) {
      const [outcome] = await storeBatch([item], slot)
      if (outcome === undefined) throw new Error('an item got no outcome')
      if (outcome instanceof Error) throw outcome
      return outcome
    },
  }
  let scheduled = false

  function flush(): void {
    scheduled = false
    while (pool.hasFree()) {
      // With a statement in flight, the next waits for company: it goes once as many items
      // wait as the statements in flight hold. Alone at a low rate, an item still goes at once
      // beside another; under load the statements stay as full as each other, and fewer: each
      // one costs both processes CPU whatever its size (BENCHMARKS.md, "Balanced statements").
      // A task (a probe) goes at once.
      if (tasks.length === 0 && waiting.size() < waiting.inFlightItems()) break
      const task = tasks.shift()
      const batch = task === undefined ? waiting.take(limits.maxBatch) : []
      if (task === undefined && batch.length === 0) break
      const slot = pool.take()
      void pool.occupy(slot, (release) =>
        task === undefined
          ? runStatement(answering, storeBatch, clock, batch, slot, release)
          : task.run(slot),
      )
    }
  }

  // Flushing after the current I/O phase lets the items parsed in it share one statement.
  function schedule(): void {
    if (!scheduled && (waiting.size() > 0 || tasks.length > 0) && pool.hasFree()) {
      scheduled = true
      clock.soon(flush)
    }
  }

  function submit(item: I, expiresAt = Number.POSITIVE_INFINITY): Promise<Settled<O>> {
    const outcome = waiting.add(item, expiresAt)
    schedule()
    return outcome
  }

  return Object.freeze({
    submit,
    probe: <T>(work: (slot: number) => Promise<T>, expiresAt: number) =>
      probeOn(tasks, schedule, clock, connectionLost, work, expiresAt),
    load: () => ({ queued: waiting.size(), inFlight: pool.inFlight(), oldestMs: pool.oldestMs() }),
    queued: waiting.size,
  })
}
