import type { Sql } from 'postgres'
import { withDeadline } from '../db/reach/unavailable.ts'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'

/**
 * The statement a batch of creates is sent as. `unnest`: one `INSERT … SELECT FROM unnest(…)`,
 * the fastest on plain PostgreSQL. `values`: a multi-row `INSERT … VALUES`, which Citus splits
 * into one task per shard the rows fall on; it runs an `unnest` batch as "pull to coordinator"
 * instead, an intermediate result on the coordinator for every statement.
 */
export type WriteShape = 'unnest' | 'values'

/**
 * How many shards plants is distributed into, as its migration decides: the DBA's
 * `citus.shard_count` where it is set, else 2 per node that takes shards (a batch costs Citus a
 * task per shard its rows fall on; docs/scaling.md).
 */
export async function plantsShardCount(sql: Sql): Promise<number> {
  const [row] = await sql<{ shards: number }[]>`
    select coalesce(
      (select setting::int from pg_settings
       where name = 'citus.shard_count' and source <> 'default'),
      (select greatest(2, 2 * count(*))::int from pg_dist_node
       where noderole = 'primary' and isactive and shouldhaveshards)
    ) as shards`
  return row?.shards ?? 2
}

/** The SQL that distributes plants on a Citus coordinator where it is still a local table. */
export const distributePlantsSql = (shards: number) =>
  `SELECT create_distributed_table('plants', 'id', shard_count := ${shards}); SELECT truncate_local_data_after_distributing_table('plants');`

/**
 * How batches of creates are sent now: the statement's shape and, on a distributed plants, where
 * each id's row lives. `signature` tells a changed layout (plants distributed or made local
 * again, a shard moved) from the same one.
 */
export type WritePath = {
  readonly shape: WriteShape
  readonly placementOf?: (id: bigint) => Placement
  readonly signature: string
}

const localPath: WritePath = { shape: 'unnest', signature: 'local' }

const routedLine = () =>
  `each batch of creates goes as multi-row INSERT … VALUES statements, one per worker that holds its rows (one per shard where they fall on at most ${shardsPerStatement} of its shards), each routed by Citus to its shards`

/**
 * Finds out whether plants is a distributed table on a Citus coordinator, and so how batches
 * are sent; `say` logs which (once, at start), and warns when the citus extension is installed
 * but plants is still local, with the SQL to run. `citus`: whether the extension is installed,
 * so whether the path can change later (`watchWritePath`).
 */
export async function plantsWritePath(
  sql: Sql,
  log: Log,
  say = true,
): Promise<{ path: WritePath; citus: boolean }> {
  const [ext] = await sql<{ citus: boolean }[]>`
    select exists (select 1 from pg_extension where extname = 'citus') as citus`
  if (!ext?.citus) {
    if (say) log.info('creates go to plants as one INSERT … SELECT FROM unnest per batch')
    return { path: localPath, citus: false }
  }
  const path = await readWritePath(sql)
  if (path.shape === 'values') {
    if (say) log.info('plants is distributed on Citus', { batches: routedLine() })
  } else if (say)
    log.warn(
      'plants is a local table on this Citus coordinator: every row stays on the coordinator; to distribute it, run the statement in `sql` as its owner (npm run migrate does this on a new database), and the service sends creates to its shards within `withinMs`',
      {
        sql: distributePlantsSql(await plantsShardCount(sql)),
        withinMs: limits.citus.writePathCheck,
      },
    )
  return { path, citus: true }
}

/**
 * Reads how batches must be sent, from Citus's metadata as it is now (the citus extension must be
 * installed): unnest while plants is local, else VALUES split by where its shards are.
 */
export async function readWritePath(sql: Sql): Promise<WritePath> {
  const ranges = await sql<Range[]>`
    select s.shardminvalue::int as min, s.shardmaxvalue::int as max, p.groupid as group
    from pg_dist_shard s join pg_dist_placement p using (shardid)
    join pg_dist_partition d using (logicalrelid)
    where s.logicalrelid = 'plants'::regclass and d.partmethod = 'h'
    order by s.shardminvalue::int`
  if (ranges.length === 0) return localPath
  return {
    shape: 'values',
    placementOf: placementsFrom(ranges),
    signature: ranges.map((r) => `${r.min}..${r.max}@${r.group}`).join(','),
  }
}

/**
 * How plants are written, read at start (`say`: with its log line) and, on Citus, again every
 * 10 s (distributing plants or moving its shards needs no restart). `current` is read for each
 * statement; `stop` ends the watching.
 */
export async function followWritePath(
  sql: Sql,
  log: Log,
  say: boolean,
): Promise<{ current: () => WritePath; stop: () => void }> {
  const found = await plantsWritePath(sql, log, say)
  let path = found.path
  const stop = found.citus
    ? watchWritePath(sql, log, path, (p) => {
        path = p
      })
    : () => {}
  return { current: () => path, stop }
}

/**
 * Reads the write path again every `everyMs` and hands a changed one to `use`, with a log line:
 * a DBA who distributes plants, makes it local again or moves its shards needs no restart. A
 * read that fails (the database away) changes nothing. Returns the stop.
 */
export function watchWritePath(
  sql: Sql,
  log: Log,
  initial: WritePath,
  use: (path: WritePath) => void,
  everyMs = limits.citus.writePathCheck,
): () => void {
  let current = initial
  let reading = false
  const timer = setInterval(async () => {
    if (reading) return
    reading = true
    try {
      const next = await withDeadline(readWritePath(sql), everyMs)
      if (next.signature === current.signature) return
      if (next.shape === 'values' && current.shape === 'unnest')
        log.info('plants is now distributed on Citus', { batches: routedLine() })
      else if (next.shape === 'values')
        log.info("plants' shards moved on Citus: batches follow where they are now")
      else
        log.warn(
          'plants is a local table on this Citus coordinator again: creates go as one INSERT … SELECT FROM unnest per batch from now on',
        )
      current = next
      use(next)
    } catch (err) {
      log.debug('could not read how plants is distributed', {
        error: describeError(err),
      })
    } finally {
      reading = false
    }
  }, everyMs)
  timer.unref()
  return () => clearInterval(timer)
}

const rot = (x: number, k: number) => ((x << k) | (x >>> (32 - k))) >>> 0

/**
 * PostgreSQL's hashint8, which Citus hashes an int8 distribution column with (`worker_hash`),
 * as a signed 32-bit integer: the fold of the two halves into one, then Bob Jenkins's
 * hash_uint32 (src/common/hashfn.c).
 */
export function hashInt8(value: bigint): number {
  const lo = Number(BigInt.asUintN(32, value))
  const hi = Number(BigInt.asUintN(32, value >> 32n))
  const k = (value >= 0n ? lo ^ hi : lo ^ ~hi) >>> 0
  let a = (0x9e3779b9 + 4 + 3923095) >>> 0
  let b = a
  let c = a
  a = (a + k) >>> 0
  c = ((c ^ b) - rot(b, 14)) >>> 0
  a = ((a ^ c) - rot(c, 11)) >>> 0
  b = ((b ^ a) - rot(a, 25)) >>> 0
  c = ((c ^ b) - rot(b, 16)) >>> 0
  a = ((a ^ c) - rot(c, 4)) >>> 0
  b = ((b ^ a) - rot(a, 14)) >>> 0
  c = ((c ^ b) - rot(b, 24)) >>> 0
  return c | 0
}

/** Where an id's row lives on Citus: the index of its shard, and the worker (group) holding it. */
export type Placement = { readonly shard: number; readonly group: number }

type Range = { min: number; max: number; group: number }

/**
 * Where each id's row lives, from shard ranges in order: batches are split by it so that each
 * statement commits on one worker. A shard moved since only makes a statement span two workers
 * until the next read (`watchWritePath`), never wrong: Citus routes every row itself. An id
 * outside every range (none should be) has shard and group -1.
 */
function placementsFrom(ranges: readonly Range[]): (id: bigint) => Placement {
  const placements = ranges.map((r, shard) => ({ shard, group: r.group }))
  const nowhere = { shard: -1, group: -1 }
  return (id) => {
    const hash = hashInt8(id)
    let lo = 0
    let hi = ranges.length - 1
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      const r = ranges[mid] as Range
      if (hash < r.min) hi = mid - 1
      else if (hash > r.max) lo = mid + 1
      else return placements[mid] ?? nowhere
    }
    return nowhere
  }
}

/** Where each id's row of a distributed plants lives, from Citus's metadata as it is now. */
export async function shardPlacements(sql: Sql): Promise<(id: bigint) => Placement> {
  const path = await readWritePath(sql)
  if (path.placementOf === undefined) throw new Error('plants is not a distributed table')
  return path.placementOf
}

/**
 * A worker's part of a batch that touches at most this many of its shards goes as one statement
 * per shard, else as one statement for the worker. A statement that spans shards costs Citus a
 * coordinated transaction on the worker (BEGIN, a distributed transaction id, COMMIT) on top of a
 * task per shard; a statement for one shard is routed as it is and commits alone. Per shard is
 * the faster with few shards a worker, and the slower with many (a part touching about 7 of
 * them): the figures are in BENCHMARKS.md, "On a Citus cluster".
 */
export const shardsPerStatement = 2

/**
 * Splits `items` into the statements a batch is sent as on Citus: one per worker, or one per
 * shard where a worker's part touches at most `shardsPerStatement` of its shards.
 */
export function splitByPlacement<T>(
  items: readonly T[],
  placementOf: (item: T) => Placement,
): T[][] {
  const byGroup = new Map<number, Map<number, T[]>>()
  for (const item of items) {
    const { shard, group } = placementOf(item)
    const shards = byGroup.get(group) ?? new Map<number, T[]>()
    byGroup.set(group, shards)
    const list = shards.get(shard)
    if (list) list.push(item)
    else shards.set(shard, [item])
  }
  const parts: T[][] = []
  for (const shards of byGroup.values()) {
    if (shards.size <= shardsPerStatement) parts.push(...shards.values())
    else parts.push([...shards.values()].flat())
  }
  return parts
}
