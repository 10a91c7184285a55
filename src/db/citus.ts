import type { Sql } from 'postgres'
import type { Log } from '../log.ts'

/**
 * The statement a batch of creates is sent as. `unnest`: one `INSERT … SELECT FROM unnest(…)`,
 * the fastest on plain PostgreSQL. `values`: a multi-row `INSERT … VALUES`, which Citus splits
 * into one task per shard the rows fall on; it runs an `unnest` batch as "pull to coordinator"
 * instead, an intermediate result on the coordinator for every statement.
 */
export type WriteShape = 'unnest' | 'values'

/** The SQL that distributes plants on a Citus coordinator where it is still a local table. */
export const distributePlantsSql =
  "SELECT create_distributed_table('plants', 'id'); SELECT truncate_local_data_after_distributing_table('plants');"

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
        'plants is distributed on Citus: creates go as one multi-row INSERT … VALUES per batch, which Citus routes to the shards its rows fall on',
      )
    return 'values'
  }
  if (say)
    log.warn(
      `plants is a local table on this Citus coordinator: every row stays on the coordinator; to distribute it, run as its owner: ${distributePlantsSql} (npm run migrate does this on a new database)`,
    )
  return 'unnest'
}
