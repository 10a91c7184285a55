import type { Sql } from 'postgres'
import { type CitusPrimaries, nodeUrl } from '../db/node.ts'
import { roomOnDisk } from '../db/reach/disk.ts'
import { openStatementSlots, slotPolicy } from '../db/reach/slots.ts'
import { connectionError, readError } from '../db/reach/unavailable.ts'
import { describeDatabase } from '../db/reach/url.ts'
import type { Trace } from '../http/trace-context.ts'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'
import { databaseFacts, type Spans } from '../tracing/spans.ts'
import type { BatchPath, CreateOutcome } from './batch-sql.ts'
import type { BatchLimits } from './batcher.ts'
import type { WritePath } from './citus.ts'
import { type DiskFull, type GapMetrics, gapHooks } from './gaps.ts'
import type { NewPlant } from './schema.ts'
import { batchOnSlots, type SlotHooks } from './slot-batching.ts'

export type { BatchLimits } from './batcher.ts'

/** What the handlers need of plant storage. */
export type PlantStore = {
  /**
   * Stores the plant, or recognises a retry; resolves only after the commit. At `expiresAt` (a
   * `performance.now()` time; by default a request's deadline from now) it rejects as
   * unavailable (deadline), whether its statement is in flight or not yet sent; one not yet sent
   * is then dropped, never sent.
   */
  readonly create: (
    plant: NewPlant,
    createdBy: string,
    expiresAt?: number,
    /** The request's trace: the span of the statement that carries the create links it. */
    trace?: Trace,
  ) => Promise<CreateOutcome>
  /**
   * Runs `work` through the creates' own slots and connections, ahead of the creates waiting:
   * whether statements get through now (readiness). Rejects as unavailable at `expiresAt`.
   */
  readonly probe: <T>(work: (sql: Sql) => Promise<T>, expiresAt: number) => Promise<T>
  /** Creates waiting for a statement, statements in flight, and the oldest one's age in ms. */
  readonly load: () => { queued: number; inFlight: number; oldestMs: number }
  /**
   * Whether the database's disk is full, as the creates found it: open from the first create
   * refused for want of disk space until one is stored again.
   */
  readonly diskFull: () => DiskFull | undefined
  /**
   * Writes one page that is rolled back (`roomOnDisk`) through the creates' slots: resolves with
   * the disk full episode when there is no room (and opens one if none was open, as a create
   * refused would), `undefined` when there is. Rejects as `probe` does for anything else.
   */
  readonly checkDisk: (expiresAt: number) => Promise<DiskFull | undefined>
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
  /**
   * `url` is this Citus worker (its group, and each group's primary as pg_dist_node names it
   * now): creates go straight to the primary of the group that holds their row.
   */
  readonly citus?: { readonly group: number; readonly primaries: CitusPrimaries } | undefined
  /** A span per insert statement, linked to its requests' spans (OTEL_EXPORTER_OTLP_ENDPOINT). */
  readonly spans?: Spans | undefined
}

type Opened = {
  store: PlantStore
  close: () => Promise<void>
  /** Opens the connections and prepares the statements that the first creates would wait for. */
  ready: (times?: number) => Promise<void>
}

/** One batching on slots of its own, which its owner can cut. */
type Batching = Opened & {
  /** Cuts every connection of its slots (what a statement in flight meets is sent again). */
  cut: (reason: Error) => number
  /** Creates waiting for a statement. */
  queued: () => number
}

/**
 * Opens the plant store on `url`: creates batched onto statement slots of their own, sent as
 * the write path says. On a Citus worker (`citus`), one such batching per group, each create
 * going to the primary of the group that holds its row (`openRoutedStore`).
 */
export function openPlantStore(url: string, log: Log, options: StoreOptions): Opened {
  const { writePath, citus } = options
  if (citus !== undefined) return openRoutedStore(url, log, options, citus)
  return openBatching(url, log, options, options.batchLimits, writePath)
}

/**
 * One batching on its own statement slots at `url` (`node`: another Citus group's primary, named
 * in its log lines, `current` its URL at each connection), each batch sent as `path` says.
 */
function openBatching(
  url: string,
  log: Log,
  { transactionPooler, connectionClosed, statementRan, gapMetrics, spans }: StoreOptions,
  batchLimits: BatchLimits,
  path: () => BatchPath,
  {
    node,
    current,
    waitingElsewhere,
  }: { node?: () => string; current?: () => string; waitingElsewhere?: () => number } = {},
): Batching {
  const slots = openStatementSlots(url, log, batchLimits.maxInFlight, {
    connectionClosed,
    transactionPooler,
    ...(current && { current }),
  })
  const named = node && (() => `the Citus worker at ${node()}`)
  const ownDatabase = databaseFacts(url)
  const gaps = gapHooks(log, gapMetrics, {
    ...(named && { where: named }),
    database: describeDatabase(url),
  })
  const where = () => (node === undefined ? { database: describeDatabase(url) } : { node: node() })
  const batching = batchOnSlots(slots, batchLimits, path, slotPolicy(slots, log, where), {
    statementRan,
    ...(spans && {
      spans: { spans, database: node ? () => databaseFacts(url, node()) : () => ownDatabase },
    }),
    ...gaps.hooks,
    ...(waitingElsewhere && { waitingElsewhere }),
    fault: (err) =>
      log.error('a fault after an insert statement; its creates were answered by its outcome', {
        error: describeError(err),
      }),
  })
  const store: PlantStore = Object.freeze({
    create: batching.create,
    probe: batching.probe,
    load: batching.load,
    diskFull: gaps.diskFull,
    async checkDisk(expiresAt: number) {
      try {
        await batching.probe(roomOnDisk, expiresAt)
        return undefined
      } catch (err) {
        if (readError(err).diskFull === undefined) throw err
        gaps.hooks.refused?.(0, err)
        return gaps.diskFull()
      }
    },
  })
  return {
    store,
    async close() {
      await Promise.all(slots.map((slot) => slot.end()))
    },
    ready: batching.ready,
    cut: (reason) => slots.reduce((sockets, slot) => sockets + slot.cut(reason), 0),
    queued: batching.queued,
  }
}

/** The other groups' primaries pg_dist_node names now, as the log says them. */
function otherPrimaries(primaries: CitusPrimaries, own: number): string {
  const others = [...primaries.all()].filter(([group]) => group !== own && group !== 0)
  return others.map(([group, node]) => `group ${group} at ${node}`).join(', ') || 'none yet'
}

/** The load of several batchings as one: creates waiting and in flight, the oldest statement. */
function sumOfLoads(all: readonly Batching[]) {
  const loads = all.map((r) => r.store.load())
  return {
    queued: loads.reduce((sum, l) => sum + l.queued, 0),
    inFlight: loads.reduce((sum, l) => sum + l.inFlight, 0),
    oldestMs: Math.max(...loads.map((l) => l.oldestMs)),
  }
}

/**
 * The plant store of an instance on a Citus worker (group `own`): each create goes to the
 * batching of the group that holds its row (one statement in flight each,
 * `limits.batch.maxInFlightPerWorker`), where its batch runs as one multi-row VALUES statement
 * that Citus executes locally (no hop from worker to worker, no distributed commit, and a
 * statement spanning that worker's shards costs about what one for a single shard does). This
 * group's batching is on `url` (every member of the group, in a highly available cluster: it
 * follows its primary by itself); another group's opens the first time a create has its row
 * there, and each of its connections goes to the group's primary as pg_dist_node names it at the
 * time (`primaries`, read again every `limits.citus.primariesCheck` ms), with this URL's database,
 * user and settings. When Patroni names another primary (a switchover, a failover), what was held
 * to the old one is cut: a statement in flight there is sent again, to the new one. A group that
 * is down or silent holds up only the creates whose rows it holds; one limit of creates waiting
 * holds for them all. Until plants is distributed (never, on a worker with synced metadata), all
 * go to this worker.
 */
function openRoutedStore(
  url: string,
  log: Log,
  options: StoreOptions,
  { group: own, primaries }: { group: number; primaries: CitusPrimaries },
): Opened {
  const { writePath } = options
  // One statement in flight to each worker (unless fewer are asked for): fuller batches.
  const batchLimits = {
    ...options.batchLimits,
    maxInFlight: Math.min(options.batchLimits.maxInFlight, limits.batch.maxInFlightPerWorker),
  }
  // A batch here holds the rows of one worker: one VALUES statement, never split.
  const oneStatement = (): BatchPath => ({ shape: 'values' })
  const all: Batching[] = []
  const waitingBeside = (opened: () => Batching | undefined) => () => {
    let waiting = 0
    for (const other of all) if (other !== opened()) waiting += other.queued()
    return waiting
  }
  /**
   * Group `group`'s primary, read at each connect: opened only for a group pg_dist_node names one
   * for, which `primaries` keeps while it names none.
   */
  const primaryOf = (group: number) => {
    const first = primaries.of(group)
    if (first === undefined)
      throw new Error(`pg_dist_node names no primary for Citus group ${group}`)
    return () => primaries.of(group) ?? first
  }
  /** This group's batching on `url`, or another `group`'s on its current primary. */
  const open = (group?: number) => {
    let opened: Batching | undefined
    const node = group === undefined ? undefined : primaryOf(group)
    opened = openBatching(url, log, options, batchLimits, oneStatement, {
      ...(node && { node, current: () => nodeUrl(url, node()) }),
      waitingElsewhere: waitingBeside(() => opened),
    })
    all.push(opened)
    return opened
  }
  const ownBatching = open()
  log.info(
    "creates go straight to the Citus worker that holds their row, where Citus runs them locally: this group's through this URL, the others' to their primaries as pg_dist_node names them, which this instance must reach as the coordinator does",
    {
      citus: 'routed',
      group: own,
      others: otherPrimaries(primaries, own),
      everyMs: limits.citus.primariesCheck,
    },
  )
  const others = new Map<number, Batching>()
  primaries.onChange((group, node, was) => {
    const opened = others.get(group)
    if (opened === undefined) return
    const sockets = opened.cut(
      connectionError(`the primary of Citus group ${group} moved to ${node}`, 'ECONNRESET'),
    )
    log.info(
      'creates of a Citus group go to its new primary; the connections to the old one are closed',
      { group, node, was, sockets },
    )
  })
  const storeOf = (plant: NewPlant): PlantStore => {
    const group = writePath().placementOf?.(plant.id).group ?? own
    if (group === own || primaries.of(group) === undefined) return ownBatching.store
    let opened = others.get(group)
    if (opened === undefined) {
      opened = open(group)
      others.set(group, opened)
      log.info('creates of a Citus group go straight to its primary', {
        group,
        node: primaries.of(group),
      })
    }
    return opened.store
  }
  return {
    store: Object.freeze({
      create: (plant, createdBy, expiresAt, trace) =>
        storeOf(plant).create(plant, createdBy, expiresAt, trace),
      probe: ownBatching.store.probe,
      load: () => sumOfLoads(all),
      diskFull: () => all.map((b) => b.store.diskFull()).find((d) => d !== undefined),
      checkDisk: ownBatching.store.checkDisk,
    } satisfies PlantStore),
    async close() {
      await Promise.all(all.map((r) => r.close()))
    },
    // The other groups' batchings open when their first create comes.
    ready: ownBatching.ready,
  }
}
