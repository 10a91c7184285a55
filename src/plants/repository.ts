import type { Sql } from 'postgres'
import type { StatementSlot } from '../db/reach/slots.ts'
import { type Failure, failure } from '../http/errors.ts'
import { limits as contractLimits } from '../limits.ts'
import { DatabaseUnavailable } from '../outcome.ts'
import { type BatchHooks, type BatchLimits, createBatcher } from './batcher.ts'
import { type Placement, splitByPlacement, type WriteShape } from './citus.ts'
import type { NewPlant, Plant } from './schema.ts'

export type { BatchLimits } from './batcher.ts'

/** The outcome of a create: stored now, an identical retry, or a conflicting id (40009). */
export type CreateOutcome = { kind: 'created' | 'retry'; plant: Plant } | Failure

/** What the HTTP layer needs of plant storage. */
export type PlantStore = {
  /**
   * Stores the plant, or recognises a retry; resolves only after the commit. At `expiresAt` (a
   * `performance.now()` time) it rejects as unavailable (deadline), whether its statement is in
   * flight or not yet sent; one not yet sent is then dropped, never sent.
   */
  readonly create: (
    plant: NewPlant,
    createdBy: string,
    expiresAt?: number,
  ) => Promise<CreateOutcome>
  /**
   * Runs `work` through the creates' own slots and connections, ahead of the creates waiting:
   * whether statements get through now (readiness). Rejects as unavailable at `expiresAt`.
   */
  readonly probe: <T>(work: (sql: Sql) => Promise<T>, expiresAt: number) => Promise<T>
  /** Creates waiting for a statement, statements in flight, and the oldest one's age in ms. */
  readonly load: () => { queued: number; inFlight: number; oldestMs: number }
}

/** One create as the batch statement takes it. */
export type NewRow = { readonly plant: NewPlant; readonly createdBy: string }

type Stored = { name: string; tag: string | null }

function toPlant(row: Stored): Plant {
  return row.tag === null ? { name: row.name } : { name: row.name, tag: row.tag }
}

/** Decides between retry (same name and tag) and conflict for an id that is already stored. */
function decideExisting(plant: NewPlant, stored: Stored): CreateOutcome {
  if (stored.name === plant.name && stored.tag === (plant.tag ?? null)) {
    return { kind: 'retry', plant: toPlant(stored) }
  }
  return failure(40009, `id ${plant.id}: a plant with this id exists with a different name or tag`)
}

/** Inserts `rows` as one multi-row VALUES statement; the ids inserted. */
function insertValues(sql: Sql, rows: readonly NewRow[]): Promise<{ id: string }[]> {
  return sql<{ id: string }[]>`
    insert into plants ${sql(
      rows.map((r) => ({
        id: r.plant.id.toString(),
        name: r.plant.name,
        tag: r.plant.tag ?? null,
        created_by: r.createdBy,
      })),
      'id',
      'name',
      'tag',
      'created_by',
    )}
    on conflict (id) do nothing
    returning id::text`
}

/**
 * On Citus with `placementOf` (where an id's row lives): one VALUES statement per worker, or per
 * shard (`splitByPlacement`), so that each commits on one worker, and a worker that is down
 * fails only the creates whose rows it holds (their outcome is the error). Throws when every
 * statement failed.
 */
async function insertRouted(
  sql: Sql,
  rows: readonly NewRow[],
  placementOf: (id: bigint) => Placement,
): Promise<{ inserted: { id: string }[]; failed: Map<string, Error> }> {
  const parts = splitByPlacement(rows, (r) => placementOf(r.plant.id))
  const settled = await Promise.allSettled(parts.map((part) => insertValues(sql, part)))
  const inserted: { id: string }[] = []
  const failed = new Map<string, Error>()
  settled.forEach((result, i) => {
    if (result.status === 'fulfilled') inserted.push(...result.value)
    else
      for (const r of parts[i] ?? [])
        failed.set(
          r.plant.id.toString(),
          result.reason instanceof Error ? result.reason : new Error(String(result.reason)),
        )
  })
  if (failed.size === rows.length) throw [...failed.values()][0]
  return { inserted, failed }
}

/**
 * Stores a batch of creates, each with its own outcome. Inserts the first create of each id in
 * one statement; the ids that were not inserted are then read in a second statement, whose fresh
 * snapshot also sees rows that concurrent transactions committed while the insert waited for
 * them. Later creates of an id in the same batch are decided against what the id ends up
 * holding: retry or 40009.
 */
export async function storePlants(
  sql: Sql,
  batch: readonly NewRow[],
  shape: WriteShape = 'unnest',
  placementOf?: (id: bigint) => Placement,
): Promise<(CreateOutcome | Error)[]> {
  const first = new Map<string, NewRow>()
  for (const row of batch) {
    const key = row.plant.id.toString()
    if (!first.has(key)) first.set(key, row)
  }
  const unique = [...first.values()]
  let failed = new Map<string, Error>()
  let inserted: { id: string }[]
  if (shape === 'values' && placementOf !== undefined) {
    const routed = await insertRouted(sql, unique, placementOf)
    inserted = routed.inserted
    failed = routed.failed
  } else if (shape === 'values') inserted = await insertValues(sql, unique)
  else
    inserted = await sql<{ id: string }[]>`
      insert into plants (id, name, tag, created_by)
      select * from unnest(
        ${unique.map((r) => r.plant.id.toString())}::int8[],
        ${unique.map((r) => r.plant.name)}::text[],
        ${unique.map((r) => r.plant.tag ?? null)}::text[],
        ${unique.map((r) => r.createdBy)}::text[]
      )
      on conflict (id) do nothing
      returning id::text`
  const created = new Set(inserted.map((r) => r.id))
  const stored = new Map<string, Stored>()
  for (const [key, r] of first) {
    if (created.has(key)) stored.set(key, { name: r.plant.name, tag: r.plant.tag ?? null })
  }
  const existing = [...first.keys()].filter((key) => !created.has(key) && !failed.has(key))
  if (existing.length > 0) {
    const rows = await sql<(Stored & { id: string })[]>`
      select id::text, name, tag from plants where id = any(${existing}::int8[])`
    for (const row of rows) stored.set(row.id, { name: row.name, tag: row.tag })
  }
  return Promise.all(
    batch.map(async (r) => {
      const key = r.plant.id.toString()
      const lost = failed.get(key)
      if (lost !== undefined) return lost
      const row = stored.get(key)
      // Neither inserted nor found: deleted in between; try that create again on its own.
      if (row === undefined) {
        const [again] = await storePlants(sql, [r], shape, placementOf)
        if (again === undefined) throw new Error('a create got no outcome')
        return again
      }
      if (created.has(key) && first.get(key) === r)
        return { kind: 'created' as const, plant: toPlant(row) }
      return decideExisting(r.plant, row)
    }),
  )
}

/** What the store tells the rest of the service (the batcher's hooks, less its own). */
export type StoreHooks = Omit<
  BatchHooks,
  'stuck' | 'stuckAfterMs' | 'readOnly' | 'connectionLost'
> & {
  /** A write met a read-only server (25006) through `sql`, which is still connected to it. */
  readonly readOnly?: (sql: Sql) => void
  /** A slot's connection was cut loose: no answer for `ms`. */
  readonly cutLoose?: (slot: number, ms: number, sockets: number) => void
  /**
   * How batches are sent, read for each statement (`plantsWritePath`): unnest unless Citus
   * distributes plants; then VALUES, per worker or per shard by where each id's row lives.
   */
  readonly writePath?: () => {
    readonly shape: WriteShape
    readonly placementOf?: (id: bigint) => Placement
  }
}

/**
 * The PostgreSQL plant store: creates that arrive while statements are in flight are coalesced
 * into one multi-row statement (one commit for all of them), yet each request gets its own
 * outcome: created, retry or conflict. Each statement in flight has a slot, a connection of its
 * own; one with no answer past the request deadline (a partition: nothing will come until the
 * kernel gives up, minutes later) is cut loose, and the slot reconnects.
 */
export function createPlantRepository(
  slots: readonly StatementSlot[],
  limits: BatchLimits = contractLimits.batch,
  {
    cutLoose = () => {},
    readOnly = () => {},
    writePath = () => ({ shape: 'unnest' as const }),
    ...hooks
  }: StoreHooks = {},
): PlantStore {
  if (slots.length < limits.maxInFlight)
    throw new Error(`${limits.maxInFlight} statements in flight need as many slots`)
  const slotSql = (slot: number): Sql => {
    const s = slots[slot]
    if (s === undefined) throw new Error(`no statement slot ${slot}`)
    return s.sql
  }
  const stuckAfterMs = contractLimits.database.cutLoose
  const batcher = createBatcher(
    (batch: readonly NewRow[], slot: number) => {
      const { shape, placementOf } = writePath()
      return storePlants(slotSql(slot), batch, shape, placementOf)
    },
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
      // A slot whose connection was lost starts again with a new pool, so no state the driver
      // kept from the old connection (a dying socket, queries parked on it) can outlive it.
      connectionLost(slot) {
        slots[slot]?.cut(new DatabaseUnavailable('the connection was lost'))
      },
    },
  )
  return Object.freeze({
    create: (plant: NewPlant, createdBy: string, expiresAt?: number) =>
      batcher.submit({ plant, createdBy }, expiresAt),
    probe: <T>(work: (sql: Sql) => Promise<T>, expiresAt: number) =>
      batcher.probe((slot) => work(slotSql(slot)), expiresAt),
    load: batcher.load,
  })
}
