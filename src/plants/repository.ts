import type { Sql } from 'postgres'
import { DatabaseUnavailable, isUnavailable, translateUnavailable } from '../db/unavailable.ts'
import { type Failure, failure } from '../errors.ts'
import type { NewPlant, Plant } from './schema.ts'

/** The outcome of a create: stored now, an identical retry, or a conflicting id (40009). */
export type CreateOutcome = { kind: 'created' | 'retry'; plant: Plant } | Failure

/** What the HTTP layer needs of plant storage. */
export type PlantStore = {
  /** Stores the plant, or recognises a retry; resolves only after the commit. */
  readonly create: (plant: NewPlant, createdBy: string) => Promise<CreateOutcome>
  /** Creates waiting for a statement, and statements in flight. */
  readonly load: () => { queued: number; inFlight: number }
}

/** How creates are grouped into statements. */
export type BatchLimits = {
  /** Most rows in one statement. */
  readonly maxBatch: number
  /** Most statements in flight at once; creates that arrive meanwhile wait and go together. */
  readonly maxInFlight: number
  /** Most creates waiting; beyond it a create is refused at once as unavailable (503). */
  readonly maxQueued: number
}

export const defaultBatchLimits: BatchLimits = { maxBatch: 1000, maxInFlight: 2, maxQueued: 10_000 }

type Stored = { name: string; tag: string | null }
type Pending = {
  readonly plant: NewPlant
  readonly createdBy: string
  readonly resolve: (outcome: CreateOutcome) => void
  readonly reject: (err: unknown) => void
}

function toPlant(row: Stored): Plant {
  return row.tag === null ? { name: row.name } : { name: row.name, tag: row.tag }
}

/** Decides between retry (same name and tag) and conflict for an id that is already stored. */
export function decideExisting(plant: NewPlant, stored: Stored): CreateOutcome {
  if (stored.name === plant.name && stored.tag === (plant.tag ?? null)) {
    return { kind: 'retry', plant: toPlant(stored) }
  }
  return failure(40009, `id ${plant.id}: a plant with this id exists with a different name or tag`)
}

/**
 * The PostgreSQL plant store. Creates that arrive while statements are in flight are coalesced
 * into one multi-row statement (one commit for all of them), yet each request gets its own
 * outcome: created, retry or conflict.
 */
export function createPlantRepository(
  sql: Sql,
  limits: BatchLimits = defaultBatchLimits,
): PlantStore {
  const queue: Pending[] = []
  let inFlight = 0
  let scheduled = false

  // One statement per create: the fallback when a batch fails for a reason other than
  // availability, so that one bad row does not fail the others.
  async function storeOne(plant: NewPlant, createdBy: string): Promise<CreateOutcome> {
    const id = plant.id.toString()
    const tag = plant.tag ?? null
    for (let attempt = 0; attempt < 3; attempt++) {
      const [row] = await sql<(Stored & { created: boolean })[]>`
        with inserted as (
          insert into plants (id, name, tag, created_by)
          values (${id}::int8, ${plant.name}, ${tag}, ${createdBy})
          on conflict (id) do nothing
          returning name, tag
        )
        select true as created, name, tag from inserted
        union all
        select false, name, tag from plants
        where id = ${id}::int8 and not exists (select from inserted)`
      if (row?.created) return { kind: 'created', plant: toPlant(row) }
      if (row) return decideExisting(plant, row)
      // Inserted by a transaction that committed after this statement's snapshot: read it anew.
      const [winner] = await sql<Stored[]>`select name, tag from plants where id = ${id}::int8`
      if (winner) return decideExisting(plant, winner)
    }
    throw new Error(`id ${id}: neither inserted nor found after 3 attempts`)
  }

  async function storeBatch(batch: readonly Pending[]): Promise<CreateOutcome[]> {
    // Only the first create of an id goes into the statement; later ones in the same batch are
    // decided against what that id ends up holding.
    const first = new Map<string, Pending>()
    for (const p of batch) {
      const key = p.plant.id.toString()
      if (!first.has(key)) first.set(key, p)
    }
    const unique = [...first.values()]
    const rows = await sql<(Stored & { id: string; created: boolean })[]>`
      with input as (
        select * from unnest(
          ${unique.map((p) => p.plant.id.toString())}::int8[],
          ${unique.map((p) => p.plant.name)}::text[],
          ${unique.map((p) => p.plant.tag ?? null)}::text[],
          ${unique.map((p) => p.createdBy)}::text[]
        ) as t(id, name, tag, created_by)
      ),
      inserted as (
        insert into plants (id, name, tag, created_by)
        select id, name, tag, created_by from input
        on conflict (id) do nothing
        returning id
      )
      select id::text, true as created, null as name, null as tag from inserted
      union all
      select id::text, false, name, tag from plants where id in (select id from input)`
    const stored = new Map<string, Stored>()
    const created = new Set<string>()
    for (const row of rows) {
      if (row.created) {
        created.add(row.id)
        const p = first.get(row.id)
        if (p) stored.set(row.id, { name: p.plant.name, tag: p.plant.tag ?? null })
      } else stored.set(row.id, { name: row.name, tag: row.tag })
    }
    // Ids inserted by transactions that committed after the statement's snapshot.
    const unseen = [...first.keys()].filter((key) => !stored.has(key))
    if (unseen.length > 0) {
      const winners = await sql<(Stored & { id: string })[]>`
        select id::text, name, tag from plants where id = any(${unseen}::int8[])`
      for (const w of winners) stored.set(w.id, { name: w.name, tag: w.tag })
    }
    return Promise.all(
      batch.map((p) => {
        const key = p.plant.id.toString()
        const row = stored.get(key)
        if (row === undefined) return storeOne(p.plant, p.createdBy)
        if (created.has(key) && first.get(key) === p)
          return { kind: 'created' as const, plant: toPlant(row) }
        return decideExisting(p.plant, row)
      }),
    )
  }

  async function run(batch: Pending[]): Promise<void> {
    try {
      const outcomes = await storeBatch(batch)
      batch.forEach((p, i) => {
        const outcome = outcomes[i]
        if (outcome) p.resolve(outcome)
        else p.reject(new Error('a create got no outcome'))
      })
    } catch (err) {
      // A lost connection or a timeout fails the whole statement, and so every create in it:
      // none of its rows was committed. Anything else is retried one create at a time.
      if (isUnavailable(err) || batch.length === 1) {
        for (const p of batch) p.reject(err)
        return
      }
      await Promise.all(batch.map((p) => storeOne(p.plant, p.createdBy).then(p.resolve, p.reject)))
    }
  }

  function flush(): void {
    scheduled = false
    while (inFlight < limits.maxInFlight && queue.length > 0) {
      const batch = queue.splice(0, limits.maxBatch)
      inFlight++
      void run(batch).finally(() => {
        inFlight--
        schedule()
      })
    }
  }

  // Flushing after the current I/O phase lets the creates parsed in it share one statement.
  function schedule(): void {
    if (!scheduled && queue.length > 0 && inFlight < limits.maxInFlight) {
      scheduled = true
      setImmediate(flush)
    }
  }

  function create(plant: NewPlant, createdBy: string): Promise<CreateOutcome> {
    if (queue.length >= limits.maxQueued) {
      return Promise.reject(
        new DatabaseUnavailable(`more than ${limits.maxQueued} creates are waiting`),
      )
    }
    return new Promise<CreateOutcome>((resolve, reject) => {
      queue.push({ plant, createdBy, resolve, reject })
      schedule()
    }).catch(translateUnavailable)
  }

  return Object.freeze({ create, load: () => ({ queued: queue.length, inFlight }) })
}
