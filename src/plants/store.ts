import { nodeUrl } from '../db/node.ts'
import { openStatementSlots } from '../db/reach/slots.ts'
import { leaveReadOnlyServer } from '../db/reach/sql.ts'
import { limits } from '../limits.ts'
import type { Log } from '../log.ts'
import { queueFull } from './batcher.ts'
import type { WritePath } from './citus.ts'
import { type GapMetrics, gapHooks } from './gaps.ts'
import {
  type BatchLimits,
  createPlantRepository,
  type PlantStore,
  type StoreHooks,
} from './repository.ts'

type StoreOptions = {
  readonly batchLimits: BatchLimits
  readonly transactionPooler: boolean
  readonly connectionClosed: () => void
  readonly statementRan: NonNullable<StoreHooks['statementRan']>
  /** Hears of creates held through a gap in the database, and sent again. */
  readonly gapMetrics: GapMetrics
}

/**
 * Opens the plant store on `url`: a statement slot (a connection of its own, cut loose when it
 * goes silent) for each statement in flight, and the repository that batches creates into them.
 * `citusGroup`: `url` is that Citus worker, and creates go straight to the worker that holds
 * their rows (`openRoutedStore`).
 */
export function openPlantStore(
  url: string,
  log: Log,
  options: StoreOptions & {
    readonly writePath: () => WritePath
    readonly citusGroup?: number | undefined
  },
): { store: PlantStore; close: () => Promise<void> } {
  const { writePath, citusGroup } = options
  if (citusGroup !== undefined) return openRoutedStore(url, log, options, citusGroup, writePath)
  return openRepository(url, log, options, writePath)
}

/** One repository on its own statement slots at `url` (`node`: another Citus worker's). */
function openRepository(
  url: string,
  log: Log,
  { batchLimits, transactionPooler, connectionClosed, statementRan, gapMetrics }: StoreOptions,
  writePath: StoreHooks['writePath'],
  node?: string,
): { store: PlantStore; close: () => Promise<void> } {
  const slots = openStatementSlots(url, log, batchLimits.maxInFlight, {
    connectionClosed,
    transactionPooler,
  })
  const store = createPlantRepository(slots, batchLimits, {
    ...(writePath && { writePath }),
    statementRan,
    ...gapHooks(log, gapMetrics, node === undefined ? undefined : `the Citus worker at ${node}`),
    readOnly: leaveReadOnlyServer(log),
    cutLoose: (slot, ms, sockets) =>
      log.warn(
        `no answer from the database${node === undefined ? '' : ` (the Citus worker at ${node})`} for ${ms} ms; closed the connection of statement slot ${slot} and opening a new one`,
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
 * The plant store of an instance on a Citus worker (group `ownGroup`): each create goes to a
 * repository of the worker that holds its row (one statement in flight each,
 * `limits.batch.maxInFlightPerWorker`), where its batch runs as one multi-row VALUES
 * statement that Citus executes locally (no hop from worker to worker, no distributed commit,
 * and a statement spanning that worker's shards costs about what one for a single shard does).
 * The others' repositories open the first time a create has its row there, at the address
 * pg_dist_node gives the worker (as the coordinator reaches it) with this URL's database, user
 * and settings. A worker that is down or silent holds up only the creates whose rows it holds.
 * Until plants is distributed (never, on a worker with synced metadata), all go to this one.
 */
function openRoutedStore(
  url: string,
  log: Log,
  options: StoreOptions,
  ownGroup: number,
  writePath: () => WritePath,
): { store: PlantStore; close: () => Promise<void> } {
  // One statement in flight to each worker (unless fewer are asked for): fuller batches.
  const maxInFlight = Math.min(options.batchLimits.maxInFlight, limits.batch.maxInFlightPerWorker)
  const each = { ...options, batchLimits: { ...options.batchLimits, maxInFlight } }
  // Each repository's batches hold rows of one worker only: one statement each.
  const oneWorker = () => {
    const path = writePath()
    return path.placementOf === undefined ? path : { shape: path.shape }
  }
  const own = openRepository(url, log, each, oneWorker)
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
  const others = new Map<string, ReturnType<typeof openRepository>>()
  const all = () => [own, ...others.values()]
  const storeOf = (group: number, path: WritePath): PlantStore => {
    if (group === ownGroup) return own.store
    const node = path.nodes?.get(group)
    if (node === undefined) return own.store
    let opened = others.get(node)
    if (opened === undefined) {
      opened = openRepository(nodeUrl(url, node), log, each, oneWorker, node)
      others.set(node, opened)
      log.info(`creates whose rows are on the Citus worker at ${node} go straight to it`, {
        node,
      })
    }
    return opened.store
  }
  const maxQueued = options.batchLimits.maxQueued
  const load = () => {
    const loads = all().map((r) => r.store.load())
    return {
      queued: loads.reduce((sum, l) => sum + l.queued, 0),
      inFlight: loads.reduce((sum, l) => sum + l.inFlight, 0),
      oldestMs: Math.max(...loads.map((l) => l.oldestMs)),
    }
  }
  return {
    store: Object.freeze({
      create(plant, createdBy, expiresAt) {
        // The limit on creates waiting is the instance's, whichever worker they wait for.
        if (load().queued >= maxQueued) return Promise.reject(queueFull(maxQueued))
        const path = writePath()
        const group = path.placementOf?.(plant.id).group ?? ownGroup
        return storeOf(group, path).create(plant, createdBy, expiresAt)
      },
      probe: own.store.probe,
      load,
    } satisfies PlantStore),
    async close() {
      await Promise.all(all().map((r) => r.close()))
    },
  }
}
