import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { migrate, migrationNames } from '../src/db/start/migrate.ts'
import { createTestDatabase, quietLog } from './helpers/database.ts'

async function tables(sql: import('postgres').Sql): Promise<string[]> {
  const rows =
    await sql`select table_name from information_schema.tables where table_schema = 'public' and table_name in ('plants', 'api_tokens') order by 1`
  return rows.map((r) => String(r.table_name))
}

describe('migrations', () => {
  test('run up, then every down, then up again', async () => {
    const db = await createTestDatabase({ after }, { migrated: false })
    assert.deepEqual(await migrate(db.url, quietLog), migrationNames())
    assert.deepEqual(await tables(db.sql), ['api_tokens', 'plants'])
    const down = await migrate(db.url, quietLog, 'down', migrationNames().length)
    assert.deepEqual(down, [...migrationNames()].reverse())
    assert.deepEqual(await tables(db.sql), [])
    assert.deepEqual(await migrate(db.url, quietLog), migrationNames())
    assert.deepEqual(await tables(db.sql), ['api_tokens', 'plants'])
  })

  test('several migrators at once wait for the lock instead of failing', async () => {
    const db = await createTestDatabase({ after }, { migrated: false })
    const runs = await Promise.all([1, 2, 3].map(() => migrate(db.url, quietLog)))
    assert.deepEqual(runs.flat().sort(), migrationNames())
  })

  test("a start that finds the schema current goes on while another holds the migrators' lock", async () => {
    const db = await createTestDatabase({ after })
    // node-pg-migrate's advisory lock, held as a migrator in another process would hold it.
    const holder = await db.sql.reserve()
    await holder`select pg_advisory_lock(7241865325823964)`
    try {
      const ran = await Promise.race([
        migrate(db.url, quietLog),
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 20_000).unref()),
      ])
      assert.deepEqual(ran, [])
    } finally {
      await holder`select pg_advisory_unlock(7241865325823964)`
      holder.release()
    }
  })

  test('applied migrations in another order than the files are refused, as node-pg-migrate does', async () => {
    const db = await createTestDatabase({ after })
    const [first, second] = migrationNames()
    assert.ok(first !== undefined && second !== undefined)
    // The first two swapped in the table's order (run_on, then id).
    await db.sql`update pgmigrations set run_on = run_on + interval '1 day' where name = ${first}`
    await assert.rejects(
      migrate(db.url, quietLog),
      /Not run migration .* is preceding already run migration/,
    )
    await db.sql`update pgmigrations set run_on = run_on - interval '1 day' where name = ${first}`
    assert.deepEqual(await migrate(db.url, quietLog), [])
  })

  test('a schema a newer version migrated further is current for this one', async () => {
    const db = await createTestDatabase({ after })
    await db.sql`insert into pgmigrations (name, run_on) values ('9999_from_a_newer_version', now() + interval '1 day')`
    assert.deepEqual(await migrate(db.url, quietLog), [])
  })

  test('the tables have the columns the contract names', async () => {
    const db = await createTestDatabase({ after })
    const columns = await db.sql`
      select table_name, column_name, data_type, is_nullable, column_default
      from information_schema.columns where table_name in ('plants', 'api_tokens')
      order by table_name, ordinal_position`
    assert.deepEqual(
      columns.map(
        (c) =>
          `${c.table_name}.${c.column_name} ${c.data_type} ${c.is_nullable === 'NO' ? 'not null' : 'null'}${c.column_default ? ` default ${c.column_default}` : ''}`,
      ),
      [
        'api_tokens.name text not null',
        'api_tokens.token_sha256 bytea not null',
        'api_tokens.created_at timestamp with time zone not null default now()',
        'api_tokens.revoked_at timestamp with time zone null',
        'api_tokens.expires_at timestamp with time zone null',
        'api_tokens.id bigint not null',
        'api_tokens.replaces bigint null',
        'api_tokens.replaced_at timestamp with time zone null',
        'api_tokens.last_used_at timestamp with time zone null',
        'plants.id bigint not null',
        'plants.name text not null',
        'plants.tag text null',
        'plants.created_at timestamp with time zone not null default now()',
        'plants.created_by text not null',
      ],
    )
  })

  test("every table and column has a comment, node-pg-migrate's pgmigrations included", async () => {
    const db = await createTestDatabase({ after })
    const missing = await db.sql`
      select c.relname || coalesce('.' || a.attname, '') as what
      from pg_class c
      left join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      where c.relname in ('plants', 'api_tokens', 'pgmigrations') and c.relkind = 'r'
        and col_description(c.oid, coalesce(a.attnum, 0)) is null
        and (a.attnum is not null or obj_description(c.oid, 'pg_class') is null)`
    assert.deepEqual(
      missing.map((r) => r.what),
      [],
    )
  })

  test('CHECK constraints refuse what the API refuses, counting code points', async () => {
    const db = await createTestDatabase({ after })
    const insert = (name: string, tag: string | null) =>
      db.sql`insert into plants (id, name, tag, created_by) values (${Math.floor(Math.random() * 1e12)}, ${name}, ${tag}, 'dba')`
    await insert('🌵'.repeat(200), '🌱'.repeat(100))
    for (const [name, tag] of [
      ['', null],
      ['a'.repeat(201), null],
      ['a', ''],
      ['a', 'b'.repeat(101)],
    ] as const) {
      await assert.rejects(insert(name, tag), (err: { code?: string }) => err.code === '23514')
    }
  })

  test('the id column keeps the whole int64 range', async () => {
    const db = await createTestDatabase({ after })
    await db.sql`insert into plants (id, name, created_by) values (-9223372036854775808, 'min', 'dba'), (9223372036854775807, 'max', 'dba')`
    const rows = await db.sql`select id::text from plants order by id`
    assert.deepEqual(
      rows.map((r) => r.id),
      ['-9223372036854775808', '9223372036854775807'],
    )
  })
})
