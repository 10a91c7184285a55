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
  const send = (batch: readonly NewRow[], slot: number) => storeBatch(slotSql(slot), batch, path())
  const batcher = createBatcher(
    spans === undefined ? send : spanned(send, spans.spans, spans.database),
    limits,
    { ...hooks, ...policy },
    clock,
  )
  return Object.freeze({
    // A create given no deadline has a request's: none is held through a gap for ever.
    create: (
      plant: NewPlant,
      createdBy: string,
      expiresAt = clock.now() + createDeadline,
      trace?: Trace,
    ): Promise<CreateOutcome> => batcher.submit({ plant, createdBy, trace }, expiresAt),
    probe: <T>(work: (sql: Sql) => Promise<T>, expiresAt: number): Promise<T> =>
      batcher.probe((slot) => work(slotSql(slot)), expiresAt),
    load: batcher.load,
    queued: batcher.queued,
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
