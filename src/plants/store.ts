import type { Sql } from 'postgres'
import { nodeUrl } from '../db/node.ts'
import { openStatementSlots } from '../db/reach/slots.ts'
import { leaveReadOnlyServer } from '../db/reach/sql.ts'
import { limits } from '../limits.ts'
import type { Log } from '../log.ts'
import type { BatchPath, CreateOutcome } from './batch-sql.ts'
import { type BatchLimits, batchOnSlots, type SlotHooks } from './batcher.ts'
import type { WritePath } from './citus.ts'
import { type GapMetrics, gapHooks } from './gaps.ts'
import type { NewPlant } from './schema.ts'

export type { BatchLimits } from './batcher.ts'

/** What the handlers need of plant storage. */
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

type StoreOptions = {
  readonly batchLimits: BatchLimits
  readonly transactionPooler: boolean
  readonly connectionClosed: () => void
  readonly statementRan: NonNullable<SlotHooks['statementRan']>
  /** Hears of creates held through a gap in the database, and sent again. */
  readonly gapMetrics: GapMetrics
  /** How plants are written now (plants/citus.ts: followWritePath). */
  readonly writePath: () => WritePath
  /** `url` is this Citus worker (its group): creates go straight to the worker of their row. */
  readonly citusGroup?: number | undefined
}

type Opened = { store: PlantStore; close: () => Promise<void> }

/**
 * Opens the plant store on `url`: creates batched onto statement slots of their own, sent as
 * the write path says. On a Citus worker (`citusGroup`), one such batching per worker, each
 * create going to the worker that holds its row (`openRoutedStore`).
 */
export function openPlantStore(url: string, log: Log, options: StoreOptions): Opened {
  const { writePath, citusGroup } = options
  if (citusGroup !== undefined) return openRoutedStore(url, log, options, citusGroup)
  return openBatching(url, log, options, options.batchLimits, writePath)
}

/**
 * One batching on its own statement slots at `url` (`node`: another Citus worker's, named in
 * its log lines), each batch sent as `path` says.
 */
function openBatching(
  url: string,
  log: Log,
  { transactionPooler, connectionClosed, statementRan, gapMetrics }: StoreOptions,
  batchLimits: BatchLimits,
  path: () => BatchPath,
  { node, waitingElsewhere }: { node?: string; waitingElsewhere?: () => number } = {},
): Opened {
  const slots = openStatementSlots(url, log, batchLimits.maxInFlight, {
    connectionClosed,
    transactionPooler,
  })
  const where = node === undefined ? '' : ` (the Citus worker at ${node})`
  const store = batchOnSlots(slots, batchLimits, path, {
    statementRan,
    ...gapHooks(log, gapMetrics, node === undefined ? undefined : `the Citus worker at ${node}`),
    ...(waitingElsewhere && { waitingElsewhere }),
    readOnly: leaveReadOnlyServer(log),
    cutLoose: (slot, ms, sockets) =>
      log.warn(
        `no answer from the database${where} for ${ms} ms; closed the connection of statement slot ${slot} and opening a new one`,
        { sockets, ...(node !== undefined && { node }) },
      ),
  })
  return {
    store,
    async close() {
      await Promise.all(slots.map((slot) => slot.end()))
    },
  }
}

/**
 * The plant store of an instance on a Citus worker (group `ownGroup`): each create goes to the
 * batching of the worker that holds its row (one statement in flight each,
 * `limits.batch.maxInFlightPerWorker`), where its batch runs as one multi-row VALUES statement
 * that Citus executes locally (no hop from worker to worker, no distributed commit, and a
 * statement spanning that worker's shards costs about what one for a single shard does). The
 * others' batchings open the first time a create has its row there, at the address
 * pg_dist_node gives the worker (as the coordinator reaches it) with this URL's database, user
 * and settings. A worker that is down or silent holds up only the creates whose rows it holds;
 * one limit of creates waiting holds for them all. Until plants is distributed (never, on a
 * worker with synced metadata), all go to this worker.
 */
function openRoutedStore(url: string, log: Log, options: StoreOptions, ownGroup: number): Opened {
  const { writePath } = options
  // One statement in flight to each worker (unless fewer are asked for): fuller batches.
  const batchLimits = {
    ...options.batchLimits,
    maxInFlight: Math.min(options.batchLimits.maxInFlight, limits.batch.maxInFlightPerWorker),
  }
  // A batch here holds the rows of one worker: one VALUES statement, never split.
  const oneStatement = (): BatchPath => ({ shape: 'values' })
  const all: Opened[] = []
  const waitingBeside = (own: () => Opened | undefined) => () => {
    let waiting = 0
    for (const opened of all) if (opened !== own()) waiting += opened.store.load().queued
    return waiting
  }
  const open = (at: string, node?: string) => {
    let opened: Opened | undefined
    opened = openBatching(at, log, options, batchLimits, oneStatement, {
      ...(node !== undefined && { node }),
      waitingElsewhere: waitingBeside(() => opened),
    })
    all.push(opened)
    return opened
  }
  const own = open(url)
  const known = [...(writePath().nodes ?? new Map<number, string>())]
  log.info(
    `creates go straight to the Citus worker that holds their row, where Citus runs them locally: this one for its own shards, the others at the addresses pg_dist_node gives them (${
      known
        .filter(([group]) => group !== ownGroup)
        .map(([, node]) => node)
        .join(', ') || 'none yet'
    }), which this instance must reach as the coordinator does`,
    { citus: 'routed' },
  )
  const others = new Map<string, Opened>()
  const storeOf = (plant: NewPlant): PlantStore => {
    const path = writePath()
    const group = path.placementOf?.(plant.id).group ?? ownGroup
    const node = group === ownGroup ? undefined : path.nodes?.get(group)
    if (node === undefined) return own.store
    let opened = others.get(node)
    if (opened === undefined) {
      opened = open(nodeUrl(url, node), node)
      others.set(node, opened)
      log.info(`creates whose rows are on the Citus worker at ${node} go straight to it`, {
        node,
      })
    }
    return opened.store
  }
  const load = () => {
    const loads = all.map((r) => r.store.load())
    return {
      queued: loads.reduce((sum, l) => sum + l.queued, 0),
      inFlight: loads.reduce((sum, l) => sum + l.inFlight, 0),
      oldestMs: Math.max(...loads.map((l) => l.oldestMs)),
    }
  }
  return {
    store: Object.freeze({
      create: (plant, createdBy, expiresAt) => storeOf(plant).create(plant, createdBy, expiresAt),
      probe: own.store.probe,
      load,
    } satisfies PlantStore),
    async close() {
      await Promise.all(all.map((r) => r.close()))
    },
  }
}
