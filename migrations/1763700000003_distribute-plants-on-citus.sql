-- Up Migration

-- On a Citus coordinator (the citus extension installed in this database), plants is
-- distributed by its primary key, so that each create and each retry look-up goes to one
-- shard. On plain PostgreSQL this does nothing. Rows already in a local plants table are copied
-- to the shards, and the local copy is then removed (Citus leaves it on disk otherwise).
-- api_tokens stays a local table on the coordinator: its NOTIFY trigger must run where the
-- service listens, and it is small and rarely written.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
    IF NOT EXISTS (
      SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'plants'::regclass
    ) THEN
      PERFORM create_distributed_table('plants', 'id');
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
