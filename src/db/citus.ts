import type { Sql } from 'postgres'
import type { Log } from '../log.ts'

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
 * Finds out whether plants is a distributed table on a Citus coordinator, and so which shape
 * batches are sent in; `say` logs which (once, at start), and warns when the citus extension is
 * installed but plants is still local, with the SQL to run.
 */
export async function plantsWriteShape(sql: Sql, log: Log, say = true): Promise<WriteShape> {
  const [ext] = await sql<{ citus: boolean }[]>`
    select exists (select 1 from pg_extension where extname = 'citus') as citus`
  if (!ext?.citus) {
    if (say) log.info('creates go to plants as one INSERT … SELECT FROM unnest per batch')
    return 'unnest'
  }
  const [dist] = await sql<{ distributed: boolean }[]>`
    select exists (
      select 1 from pg_dist_partition where logicalrelid = 'plants'::regclass
    ) as distributed`
  if (dist?.distributed) {
    if (say)
      log.info(
        `plants is distributed on Citus: each batch of creates goes as multi-row INSERT … VALUES statements, one per worker that holds its rows (one per shard where they fall on at most ${shardsPerStatement} of its shards), each routed by Citus to its shards`,
      )
    return 'values'
  }
  if (say)
    log.warn(
      `plants is a local table on this Citus coordinator: every row stays on the coordinator; to distribute it, run as its owner: ${distributePlantsSql(await plantsShardCount(sql))} (npm run migrate does this on a new database), then restart the service: it chooses how to send creates at start`,
    )
  return 'unnest'
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

/**
 * Where each id's row lives, from Citus's metadata as it is now: batches are split by it so that
 * each statement commits on one worker. A shard moved later only makes a statement span two
 * workers again, never wrong: Citus routes every row itself. An id outside every range (none
 * should be) has shard and group -1.
 */
export async function shardPlacements(sql: Sql): Promise<(id: bigint) => Placement> {
  const ranges = await sql<{ min: number; max: number; group: number }[]>`
    select s.shardminvalue::int as min, s.shardmaxvalue::int as max, p.groupid as group
    from pg_dist_shard s join pg_dist_placement p using (shardid)
    where s.logicalrelid = 'plants'::regclass
    order by s.shardminvalue::int`
  const placements = ranges.map((r, shard) => ({ shard, group: r.group }))
  const nowhere = { shard: -1, group: -1 }
  return (id) => {
    const hash = hashInt8(id)
    let lo = 0
    let hi = ranges.length - 1
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      const r = ranges[mid] as { min: number; max: number }
      if (hash < r.min) hi = mid - 1
      else if (hash > r.max) lo = mid + 1
      else return placements[mid] ?? nowhere
    }
    return nowhere
  }
}

/**
 * A worker's part of a batch that touches at most this many of its shards goes as one statement
 * per shard, else as one statement for the worker. A statement that spans shards costs Citus a
 * coordinated transaction on the worker (BEGIN, a distributed transaction id, COMMIT) on top of a
 * task per shard; a statement for one shard is routed as it is and commits alone. With 4 shards
 * on 2 workers, per shard measured 1.49 to 1.63x pgbench's single-row inserts against 1.14 to
 * 1.33x per worker; with 32, where a part touches about 7 shards, per shard fell to 0.6x.
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
