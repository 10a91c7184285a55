import type { Sql } from 'postgres'

// The SQLSTATE the check raises to roll itself back (class P0, PL/pgSQL's, unused by PostgreSQL).
const rolledBack = 'P0R01'

/**
 * Whether the database's disk has room for one more page, without keeping anything: a temporary
 * table made and one row written in it, in one statement that then raises an error of its own
 * and so is rolled back. The table's first page is allocated on disk as it is made (PostgreSQL
 * writes a relation's new pages out when it extends it, temporary ones too), so on a full disk
 * the insert fails with disk_full (53100, "could not extend file"); rolled back, the file is
 * removed and no WAL is flushed. It lands where temporary tables do (`temp_tablespaces`, by
 * default the database's own tablespace, as `plants`). Run only while creates fail for want of
 * disk space, and once at start: it is a write, and costs a few catalog rows that autovacuum
 * removes. Resolves when there was room; rejects with the database's error otherwise.
 */
export async function roomOnDisk(sql: Sql): Promise<void> {
  await sql
    .unsafe(
      `do $$ begin
        create temporary table plant_store_room (b text) on commit drop;
        insert into plant_store_room values ('x');
        raise exception 'rolled back' using errcode = '${rolledBack}';
      end $$`,
    )
    .simple()
    .catch((err: { code?: unknown }) => {
      if (err.code !== rolledBack) throw err
    })
}
