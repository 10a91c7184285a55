import type { Sql } from 'postgres'
import { translateUnavailable } from '../db/unavailable.ts'
import { type Failure, failure } from '../errors.ts'
import type { NewPlant, Plant } from './schema.ts'

/** The outcome of a create: stored now, an identical retry, or a conflicting id (40009). */
export type CreateOutcome = { kind: 'created' | 'retry'; plant: Plant } | Failure

/** What the HTTP layer needs of plant storage. */
export type PlantStore = {
  /** Stores the plant, or recognises a retry; resolves only after the commit. */
  readonly create: (plant: NewPlant, createdBy: string) => Promise<CreateOutcome>
}

type Row = { created: boolean; name: string; tag: string | null }

function toPlant(row: { name: string; tag: string | null }): Plant {
  return row.tag === null ? { name: row.name } : { name: row.name, tag: row.tag }
}

/** Decides between retry (same name and tag) and conflict for an id that is already stored. */
export function decideExisting(
  plant: NewPlant,
  stored: { name: string; tag: string | null },
): CreateOutcome {
  if (stored.name === plant.name && stored.tag === (plant.tag ?? null)) {
    return { kind: 'retry', plant: toPlant(stored) }
  }
  return failure(40009, `id ${plant.id}: a plant with this id exists with a different name or tag`)
}

/** The PostgreSQL plant store: one statement per create in the common case. */
export function createPlantRepository(sql: Sql): PlantStore {
  async function create(plant: NewPlant, createdBy: string): Promise<CreateOutcome> {
    const id = plant.id.toString()
    const tag = plant.tag ?? null
    // An id inserted by a concurrent transaction that commits while this statement waits is
    // invisible to the statement's snapshot: then neither branch returns a row, and a new
    // statement (with a new snapshot) reads the winner.
    for (let attempt = 0; attempt < 3; attempt++) {
      const [row] = await sql<Row[]>`
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
      const [winner] = await sql<Row[]>`select name, tag from plants where id = ${id}::int8`
      if (winner) return decideExisting(plant, winner)
    }
    throw new Error(`id ${id}: neither inserted nor found after 3 attempts`)
  }

  return Object.freeze({
    create: (plant: NewPlant, createdBy: string) =>
      create(plant, createdBy).catch(translateUnavailable),
  })
}
