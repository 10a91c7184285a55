import type { Sql } from 'postgres'
import { DatabaseUnavailable, isUnavailable, translateUnavailable } from '../db/unavailable.ts'
import { type Failure, failure } from '../http/errors.ts'
import { limits as contractLimits } from '../limits.ts'
import type { NewPlant, Plant } from './schema.ts'

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
  /** Creates waiting for a statement, and statements in flight. */
  readonly load: () => { queued: number; inFlight: number }
}

/** What the store tells the rest of the service. */
export type StoreHooks = {
  /** Every batch stored: its rows and seconds (for the metrics). */
  readonly statementRan?: (rows: number, seconds: number) => void
  /** A write met a read-only server (25006): the pool should leave it. */
  readonly readOnly?: () => void
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

const pastDeadline = () =>
  new DatabaseUnavailable("no answer from the database before the request's deadline", {
    reason: 'deadline',
  })

type Stored = { name: string; tag: string | null }
type Pending = {
  readonly plant: NewPlant
  readonly createdBy: string
  readonly expiresAt: number
  readonly resolve: (outcome: CreateOutcome) => void
  readonly reject: (err: unknown) => void
}

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

/**
 * The PostgreSQL plant store. Creates that arrive while statements are in flight are coalesced
 * into one multi-row statement (one commit for all of them), yet each request gets its own
 * outcome: created, retry or conflict.
 */
export function createPlantRepository(
  sql: Sql,
  limits: BatchLimits = contractLimits.batch,
  { statementRan = () => {}, readOnly = () => {} }: StoreHooks = {},
): PlantStore {
  const queue: Pending[] = []
  let inFlight = 0
  let scheduled = false

  // Inserts the first create of each id in one statement; the ids that were not inserted are
  // then read in a second statement, whose fresh snapshot also sees rows that concurrent
  // transactions committed while the insert waited for them. Later creates of an id in the same
  // batch are decided against what the id ends up holding: retry or 40009.
  async function storeBatch(batch: readonly Pending[]): Promise<CreateOutcome[]> {
    const first = new Map<string, Pending>()
    for (const p of batch) {
      const key = p.plant.id.toString()
      if (!first.has(key)) first.set(key, p)
    }
    const unique = [...first.values()]
    const inserted = await sql<{ id: string }[]>`
      insert into plants (id, name, tag, created_by)
      select * from unnest(
        ${unique.map((p) => p.plant.id.toString())}::int8[],
        ${unique.map((p) => p.plant.name)}::text[],
        ${unique.map((p) => p.plant.tag ?? null)}::text[],
        ${unique.map((p) => p.createdBy)}::text[]
      )
      on conflict (id) do nothing
      returning id::text`
    const created = new Set(inserted.map((r) => r.id))
    const stored = new Map<string, Stored>()
    for (const [key, p] of first) {
      if (created.has(key)) stored.set(key, { name: p.plant.name, tag: p.plant.tag ?? null })
    }
    const existing = [...first.keys()].filter((key) => !created.has(key))
    if (existing.length > 0) {
      const rows = await sql<(Stored & { id: string })[]>`
        select id::text, name, tag from plants where id = any(${existing}::int8[])`
      for (const row of rows) stored.set(row.id, { name: row.name, tag: row.tag })
    }
    return Promise.all(
      batch.map(async (p) => {
        const key = p.plant.id.toString()
        const row = stored.get(key)
        // Neither inserted nor found: deleted in between; try that create again on its own.
        if (row === undefined) return storeAlone(p)
        if (created.has(key) && first.get(key) === p)
          return { kind: 'created' as const, plant: toPlant(row) }
        return decideExisting(p.plant, row)
      }),
    )
  }

  async function storeAlone(p: Pending): Promise<CreateOutcome> {
    const [outcome] = await storeBatch([p])
    if (outcome === undefined) throw new Error('a create got no outcome')
    return outcome
  }

  // A create is answered 503 at its deadline whether it still waits or its statement is in
  // flight (the driver may stall for seconds while it reconnects): one timer for the queue's
  // oldest create and one per statement, rather than one per request.
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

  // Creates wait in arrival order with one deadline length, so the expired ones lead the queue.
  function dropExpired(): void {
    const now = performance.now()
    let expired = 0
    while (expired < queue.length && (queue[expired]?.expiresAt ?? now) <= now) expired++
    for (const p of queue.splice(0, expired)) p.reject(pastDeadline())
  }

  /** Answers each create of a statement in flight at its deadline; returns the stop. */
  function watchBatch(batch: readonly Pending[]): () => void {
    let timer: ReturnType<typeof setTimeout> | undefined
    const check = () => {
      const now = performance.now()
      let next = Number.POSITIVE_INFINITY
      for (const p of batch) {
        // Rejecting a create a second time, or after its outcome, changes nothing.
        if (p.expiresAt <= now) p.reject(pastDeadline())
        else if (p.expiresAt < next) next = p.expiresAt
      }
      timer = next === Number.POSITIVE_INFINITY ? undefined : setTimeout(check, next - now)
    }
    check()
    return () => clearTimeout(timer)
  }

  async function run(batch: Pending[]): Promise<void> {
    const started = performance.now()
    const stopWatching = watchBatch(batch)
    try {
      const outcomes = await storeBatch(batch)
      statementRan(batch.length, (performance.now() - started) / 1000)
      batch.forEach((p, i) => {
        const outcome = outcomes[i]
        if (outcome) p.resolve(outcome)
        else p.reject(new Error('a create got no outcome'))
      })
    } catch (err) {
      // A lost connection or a timeout answers every create of the batch 503: its insert is one
      // transaction, so all its rows or none are stored, and a retry is safe either way.
      // Any other error is retried one create at a time, so one bad row fails only itself.
      if (isUnavailable(err) || batch.length === 1) {
        if ((err as { code?: unknown }).code === '25006') readOnly()
        for (const p of batch) p.reject(err)
        return
      }
      await Promise.all(batch.map((p) => storeAlone(p).then(p.resolve, p.reject)))
    } finally {
      stopWatching()
    }
  }

  function flush(): void {
    scheduled = false
    dropExpired()
    while (inFlight < limits.maxInFlight && queue.length > 0) {
      const batch = queue.splice(0, limits.maxBatch)
      inFlight++
      void run(batch).finally(() => {
        inFlight--
        schedule()
      })
    }
    watchQueue()
  }

  // Flushing after the current I/O phase lets the creates parsed in it share one statement.
  function schedule(): void {
    if (!scheduled && queue.length > 0 && inFlight < limits.maxInFlight) {
      scheduled = true
      setImmediate(flush)
    }
  }

  function create(
    plant: NewPlant,
    createdBy: string,
    expiresAt = Number.POSITIVE_INFINITY,
  ): Promise<CreateOutcome> {
    if (queue.length >= limits.maxQueued) {
      return Promise.reject(
        new DatabaseUnavailable(`more than ${limits.maxQueued} creates are waiting`, {
          reason: 'queue_full',
        }),
      )
    }
    return new Promise<CreateOutcome>((resolve, reject) => {
      queue.push({ plant, createdBy, expiresAt, resolve, reject })
      schedule()
      watchQueue()
    }).catch(translateUnavailable)
  }

  return Object.freeze({ create, load: () => ({ queued: queue.length, inFlight }) })
}
