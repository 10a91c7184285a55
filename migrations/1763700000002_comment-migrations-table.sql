-- Up Migration

-- node-pg-migrate makes this table itself; its comments are added here, so that every table of
-- the database the service uses says what it holds.
COMMENT ON TABLE pgmigrations IS
  'Migrations applied to this database, one row each (node-pg-migrate; npm run migrate).';
COMMENT ON COLUMN pgmigrations.id IS 'Order in which the migrations were applied.';
COMMENT ON COLUMN pgmigrations.name IS 'File name of the migration in migrations/, without .sql.';
COMMENT ON COLUMN pgmigrations.run_on IS 'When the migration was applied.';

-- Down Migration

COMMENT ON TABLE pgmigrations IS NULL;
COMMENT ON COLUMN pgmigrations.id IS NULL;
COMMENT ON COLUMN pgmigrations.name IS NULL;
COMMENT ON COLUMN pgmigrations.run_on IS NULL;
