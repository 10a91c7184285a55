import type { Sql } from 'postgres'
import { type Clock, systemClock } from '../clock.ts'
import type { SlotPolicy, StatementSlot } from '../db/reach/slots.ts'
import type { Trace } from '../http/trace-context.ts'
import { limits as contractLimits } from '../limits.ts'
import type { DatabaseFacts, Spans } from '../tracing/spans.ts'
import {
  type BatchPath,
  type CreateOutcome,
  type NewRow,
  readyForBatches,
  storeBatch,
} from './batch-sql.ts'
import { type BatchHooks, type BatchLimits, createBatcher } from './batcher.ts'
import type { NewPlant } from './schema.ts'

/**
 * `send` with a span per statement (`spans.statement`), linked to the requests of its rows; a
 * statement none of whose requests is sampled runs without one.
 */
function spanned<O>(
  send: (batch: readonly NewRow[], slot: number) => Promise<O>,
  spans: Spans,
  database: () => DatabaseFacts,
): (batch: readonly NewRow[], slot: number) => Promise<O> {
  return async (batch, slot) => {
    // The warm-up's statements are no one's: never traced.
    if (batch[0]?.echo === true) return send(batch, slot)
    const span = spans.statement(
      batch.map((row) => row.trace),
      { rows: batch.length, slot, database: database() },
    )
    if (span === undefined) return send(batch, slot)
    try {
      const outcomes = await send(batch, slot)
      span.end()
      return outcomes
    } catch (err) {
      span.end(err)
      throw err
    }
  }
}

/** The hooks that report the database's work (metrics, gaps), not the warm-up's. */
const reporting = ['statementRan', 'through', 'refused', 'held', 'heldEnded', 'expired'] as const

/** What the warm-up's statements report to instead (`echo`): its own metrics' registry. */
export type EchoHooks = Pick<BatchHooks, 'statementRan'>

/**
 * `hooks` with those that report (`reporting`) going to `echo()`'s instead while it gives some:
 * the warm-up's statements are neither counted nor logged as the database's.
 */
function asideWhile<H extends Omit<BatchHooks, keyof SlotPolicy>>(
  echo: () => EchoHooks | undefined,
  hooks: H,
): H {
  const aside: Record<string, unknown> = { ...hooks }
  for (const name of reporting) {
    const hook = hooks[name] as ((...args: never[]) => void) | undefined
    if (hook !== undefined)
      aside[name] = (...args: never[]) => {
        const instead = echo()
        // One call for both: the code compiled during the warm-up calls the hook after it.
        const target =
          instead === undefined
            ? hook
            : (instead[name as keyof EchoHooks] as ((...args: never[]) => void) | undefined)
        target?.(...args)
      }
  }
  return aside as H
}

/**
 * A batch holding both warm-up creates and clients' (never formed while the warm-up runs as it
 * does: its creates are all answered before the instance listens): the clients' stored, the
 * warm-up's refused, never sent.
 */
async function storeApart(
  store: (batch: readonly NewRow[]) => Promise<(CreateOutcome | Error)[]>,
  batch: readonly NewRow[],
): Promise<(CreateOutcome | Error)[]> {
  const stored = await store(batch.filter((row) => row.echo !== true))
  let next = 0
  return batch.map((row) =>
    row.echo === true
      ? new Error('a warm-up create outlived the warm-up: not sent')
      : (stored[next++] ?? new Error('a create got no outcome')),
  )
}

/** What `batchOnSlots` hears besides the slot policy's hooks. */
export type SlotHooks = Omit<BatchHooks, keyof SlotPolicy> & {
  /** A span per statement (OTLP), and the database it names. */
  readonly spans?: { readonly spans: Spans; readonly database: () => DatabaseFacts }
}

/**
 * Creates batched onto statement slots: the creates that arrive while statements are in flight
 * are coalesced into one batch (one commit for all of them), yet each gets its own outcome:
 * created, retry or conflict. Each statement in flight has a slot, a connection of its own; what
 * happens to a slot whose statement is stuck, lost its connection or met a read-only server is
 * `policy`'s (slots.ts). `path` says how a batch is sent, read once for each batch.
 */
export function batchOnSlots(
  slots: readonly StatementSlot[],
  limits: BatchLimits,
  path: () => BatchPath,
  policy?: SlotPolicy,
  { spans, ...hooks }: SlotHooks = {},
  clock: Clock = systemClock,
) {
  if (slots.length < limits.maxInFlight)
    throw new Error(`${limits.maxInFlight} statements in flight need as many slots`)
  const slotSql = (slot: number): Sql => {
    const s = slots[slot]
    if (s === undefined) throw new Error(`no statement slot ${slot}`)
    return s.forStatement()
  }
  const createDeadline = contractLimits.database.request - contractLimits.database.answerMargin
  // While the warm-up runs (`echo`), its creates take the same path as clients' will, batcher,
  // slots, driver and `storeBatch`, so that the code V8 compiles for them is the code that serves
  // the clients; only their statement reads the rows back instead of inserting them.
  let echoing: EchoHooks | undefined
  const send = (batch: readonly NewRow[], slot: number) => {
    let echoes = 0
    for (const row of batch) if (row.echo === true) echoes++
    if (echoes > 0 && echoes < batch.length)
      return storeApart((rows) => storeBatch(slotSql(slot), rows, path()), batch)
    // One call for both, so that the warm-up's is the clients'.
    return storeBatch(slotSql(slot), batch, path(), echoes > 0)
  }
  const batcher = createBatcher(
    spans === undefined ? send : spanned(send, spans.spans, spans.database),
    limits,
    { ...asideWhile(() => echoing, hooks), ...policy },
    clock,
  )
  return Object.freeze({
    // A create given no deadline has a request's: none is held through a gap for ever.
    create: (
      plant: NewPlant,
      createdBy: string,
      expiresAt = clock.now() + createDeadline,
      trace?: Trace,
    ): Promise<CreateOutcome> =>
      batcher.submit({ plant, createdBy, trace, echo: echoing !== undefined }, expiresAt),
    probe: <T>(work: (sql: Sql) => Promise<T>, expiresAt: number): Promise<T> =>
      batcher.probe((slot) => work(slotSql(slot)), expiresAt),
    load: batcher.load,
    queued: batcher.queued,
    /**
     * While `hooks` are given, each create is the warm-up's: read back through the database, never
     * stored, and its statements reported to `hooks` alone, never traced.
     */
    echo: (hooks: EchoHooks | undefined) => {
      echoing = hooks
    },
    /**
     * Opens every slot's connection and prepares the batch statements there, before the first
     * create would pay for it (at start, before the instance says it is ready); run `times`
     * times, they also ready the driver's code that every batch runs.
     */
    ready: async (times = 1): Promise<void> => {
      await Promise.all(
        slots.map(async (slot) => {
          for (let i = 0; i < times; i++) await readyForBatches(slot.forStatement(), path())
        }),
      )
    },
  })
}
