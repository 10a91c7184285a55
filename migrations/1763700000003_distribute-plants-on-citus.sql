-- Up Migration

-- On a Citus coordinator (the citus extension installed in this database), plants is
-- distributed by its primary key, so that each create and each retry look-up goes to one
-- shard. On plain PostgreSQL this does nothing. Rows already in a local plants table are copied
-- to the shards, and the local copy is then removed (Citus leaves it on disk otherwise).
-- api_tokens stays a local table on the coordinator: its NOTIFY trigger must run where the
-- service listens, and it is small and rarely written.
--
-- Shards: the DBA's citus.shard_count where it is set (server, database, role or session),
-- else 2 per node that takes shards. A batch of creates costs Citus a task for every shard its
-- rows fall on, so fewer shards mean more rows per task (Citus's default of 32 measured 1.0x
-- pgbench's single-row inserts on two workers, 4 shards 1.2x and more: docs/scaling.md); 2 per
-- node still lets the cluster double its nodes by moving shards, without splitting them.
DO $$
DECLARE
  shards int;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
    IF NOT EXISTS (
      SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'plants'::regclass
    ) THEN
      SELECT setting::int INTO shards FROM pg_settings
      WHERE name = 'citus.shard_count' AND source <> 'default';
      IF shards IS NULL THEN
        SELECT greatest(2, 2 * count(*))::int INTO shards FROM pg_dist_node
        WHERE noderole = 'primary' AND isactive AND shouldhaveshards;
      END IF;
      PERFORM create_distributed_table('plants', 'id', shard_count := shards);
      PERFORM truncate_local_data_after_distributing_table('plants');
    END IF;
  END IF;
END
$$;

-- Down Migration

-- Back to a local table with every row, so that the migration before this one finds plants as
-- it left it.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
    IF EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'plants'::regclass) THEN
      PERFORM undistribute_table('plants');
    END IF;
  END IF;
END
$$;
