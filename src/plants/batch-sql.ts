import type { Sql } from 'postgres'
import type { Trace } from '../http/trace-context.ts'
import type { Fault, Unavailable } from '../outcome.ts'
import { type Placement, splitByPlacement, type WriteShape } from './citus.ts'
import type { NewPlant, Plant } from './schema.ts'

// The SQL of a batch of creates: one statement (or, on Citus, one per worker or shard) for all
// of them, and each create's own outcome decided from what the table holds.

/**
 * What the table says of a create: stored now, an identical retry, or a conflict (its id is
 * stored with another name or tag).
 */
export type StoredOutcome =
  | { readonly kind: 'created' | 'retry'; readonly plant: Plant }
  | { readonly kind: 'conflict'; readonly id: bigint }

/**
 * How a create ends, whatever ended it: what the table says, unavailable (503: no database took
 * it in time, or too many wait), or a fault (500). The one shape from the store to the handler.
 */
export type CreateOutcome = StoredOutcome | Unavailable | Fault

/**
 * How a batch is sent: `unnest` (plain PostgreSQL) or `values`; with `placementOf` (where an
 * id's row lives on Citus) split into one statement per worker or shard (`splitByPlacement`),
 * without it one statement for the whole batch (all its rows on one worker, or not on Citus).
 */
export type BatchPath = {
  readonly shape: WriteShape
  readonly placementOf?: ((id: bigint) => Placement) | undefined
}

/** One create as the batch statement takes it. */
export type NewRow = {
  readonly plant: NewPlant
  readonly createdBy: string
  /** The trace of the request that sent it, which the statement's span links. */
  readonly trace?: Trace | undefined
}

type Stored = { name: string; tag: string | null }

function toPlant(row: Stored): Plant {
  return row.tag === null ? { name: row.name } : { name: row.name, tag: row.tag }
}

/** A create's outcome when its row was inserted. */
export function createdOutcome(row: Stored): StoredOutcome {
  return { kind: 'created', plant: toPlant(row) }
}

/** Decides between retry (same name and tag) and conflict for an id that is already stored. */
function decideExisting(plant: NewPlant, stored: Stored): StoredOutcome {
  if (stored.name === plant.name && stored.tag === (plant.tag ?? null)) {
    return { kind: 'retry', plant: toPlant(stored) }
  }
  return { kind: 'conflict', id: plant.id }
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

/** Inserts `rows` as one statement of arrays (`unnest`), the same text whatever their number. */
function insertUnnest(sql: Sql, rows: readonly NewRow[]): Promise<{ id: string }[]> {
  return sql<{ id: string }[]>`
    insert into plants (id, name, tag, created_by)
    select * from unnest(
      ${rows.map((r) => r.plant.id.toString())}::int8[],
      ${rows.map((r) => r.plant.name)}::text[],
      ${rows.map((r) => r.plant.tag ?? null)}::text[],
      ${rows.map((r) => r.createdBy)}::text[]
    )
    on conflict (id) do nothing
    returning id::text`
}

/** What the table holds of `ids`. */
function selectStored(sql: Sql, ids: readonly string[]): Promise<(Stored & { id: string })[]> {
  return sql<(Stored & { id: string })[]>`
    select id::text, name, tag from plants where id = any(${ids as string[]}::int8[])`
}

/**
 * Readies `sql`'s connection for the batches `path` sends, before the first create: opened, and
 * the statements of a batch prepared there by running them on no rows (nothing is written, no
 * transaction id is taken). A VALUES insert's text depends on its number of rows: only its
 * connection and the read of stored rows are readied.
 */
export async function readyForBatches(sql: Sql, path: BatchPath): Promise<void> {
  if (path.shape === 'unnest') await insertUnnest(sql, [])
  await selectStored(sql, [])
}

/**
 * Sends `rows` through the database and back without storing them: a statement of arrays, as a
 * batch's, whose rows are read back. What a warm-up sends, so that the driver's code for a
 * batch and its rows runs before the first create.
 */
export function echoBatch(sql: Sql, rows: readonly NewRow[]): Promise<Stored[]> {
  return sql<Stored[]>`
    select name, tag from unnest(
      ${rows.map((r) => r.plant.id.toString())}::int8[],
      ${rows.map((r) => r.plant.name)}::text[],
      ${rows.map((r) => r.plant.tag ?? null)}::text[],
      ${rows.map((r) => r.createdBy)}::text[]
    ) as t(id, name, tag, created_by)`
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
 * Stores a batch of creates, each with its own outcome, sent as `path` says (read once for the
 * batch by its caller). Inserts the first create of each id in
 * one statement; the ids that were not inserted are then read in a second statement, whose fresh
 * snapshot also sees rows that concurrent transactions committed while the insert waited for
 * them. Later creates of an id in the same batch are decided against what the id ends up
 * holding: retry or 40009.
 */
export async function storeBatch(
  sql: Sql,
  batch: readonly NewRow[],
  path: BatchPath,
): Promise<(StoredOutcome | Error)[]> {
  const { shape, placementOf } = path
  // Each id's text once, as the key of every map below.
  const keys = batch.map((row) => row.plant.id.toString())
  const first = new Map<string, NewRow>()
  for (let i = 0; i < batch.length; i++) {
    const key = keys[i] as string
    if (!first.has(key)) first.set(key, batch[i] as NewRow)
  }
  const unique = [...first.values()]
  let failed = new Map<string, Error>()
  let inserted: { id: string }[]
  if (shape === 'values' && placementOf !== undefined) {
    const routed = await insertRouted(sql, unique, placementOf)
    inserted = routed.inserted
    failed = routed.failed
  } else if (shape === 'values') inserted = await insertValues(sql, unique)
  else inserted = await insertUnnest(sql, unique)
  const created = new Set<string>()
  for (const row of inserted) created.add(row.id)
  const stored = new Map<string, Stored>()
  const existing: string[] = []
  for (const [key, r] of first) {
    if (created.has(key)) stored.set(key, { name: r.plant.name, tag: r.plant.tag ?? null })
    else if (!failed.has(key)) existing.push(key)
  }
  if (existing.length > 0) {
    const rows = await selectStored(sql, existing)
    for (const row of rows) stored.set(row.id, { name: row.name, tag: row.tag })
  }
  // Each create's outcome at once; only one whose row was neither inserted nor found waits, for
  // a statement of its own.
  const outcomes: (StoredOutcome | Error | Promise<StoredOutcome | Error>)[] = []
  let sentAgain = false
  for (let i = 0; i < batch.length; i++) {
    const r = batch[i] as NewRow
    const key = keys[i] as string
    const lost = failed.get(key)
    const row = stored.get(key)
    if (lost !== undefined) outcomes.push(lost)
    else if (row === undefined) {
      // Deleted in between: that create is tried again on its own.
      sentAgain = true
      outcomes.push(
        storeBatch(sql, [r], path).then(([again]) => {
          if (again === undefined) throw new Error('a create got no outcome')
          return again
        }),
      )
    } else if (created.has(key) && first.get(key) === r) outcomes.push(createdOutcome(row))
    else outcomes.push(decideExisting(r.plant, row))
  }
  return sentAgain ? Promise.all(outcomes) : (outcomes as (StoredOutcome | Error)[])
}
