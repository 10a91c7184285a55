import { totalmem } from 'node:os'
import type { Sql } from 'postgres'
import { limits } from '../../limits.ts'
import type { Log } from '../../log.ts'
import { createSql } from '../reach/sql.ts'

// Clients choose their own ids, often at random, and the table of creates only grows. Once the
// primary key's index outgrows shared_buffers nearly every row lands on an index page of its
// own, and the first change to a page after a checkpoint writes the whole 8 KB page to the WAL:
// about 5,000 bytes of WAL per row at 40 million rows, against 250 on a small table. These are
// the server settings that matter for that, applied to the embedded PostgreSQL and checked in a
// DBA's (docs/operations.md, "PostgreSQL settings for a growing table").

/** shared_buffers for this machine: a quarter of its memory, from 128 MB up to 2 GB. */
export function sharedBuffersMb(totalBytes = totalmem()): number {
  return Math.max(128, Math.min(2048, Math.floor(totalBytes / 2 ** 20 / 4)))
}

/**
 * The embedded PostgreSQL's settings for a growing table, given at every start (so a data folder
 * made before them gets them too). wal_compression depends on how the binaries were built and
 * is chosen once the server runs (`chooseWalCompression`).
 */
export function growthSettings(totalBytes = totalmem()): Record<string, string> {
  return {
    shared_buffers: `${sharedBuffersMb(totalBytes)}MB`,
    // Checkpoints by time, not by WAL volume: each checkpoint makes the next change of every page
    // a full-page image again, so fewer of them mean less WAL per row.
    max_wal_size: '8GB',
    checkpoint_timeout: '15min',
  }
}

/**
 * wal_compression methods, best first: lz4 is fast and cuts WAL per row several times. pglz is
 * left out: it spends CPU on every full-page image and saves little on this table's index pages,
 * slower than `off` at 40 million rows (BENCHMARKS.md, "A table that grows").
 */
const compressionPreference = ['lz4', 'zstd'] as const

/**
 * Sets wal_compression to the best method these binaries support (ALTER SYSTEM, then a reload:
 * it needs no restart), detected from the values the server accepts, never assumed; `off` where
 * they support neither lz4 nor zstd. Returns it.
 */
export async function chooseWalCompression(sql: Sql): Promise<string> {
  const [row] = await sql<{ enumvals: string[] | string | null; setting: string }[]>`
    select enumvals, setting from pg_settings where name = 'wal_compression'`
  const raw = row?.enumvals ?? []
  // Without fetched types the driver hands text[] over as its literal, {a,b,c}.
  const accepted = typeof raw === 'string' ? raw.replace(/^\{|\}$/g, '').split(',') : raw
  const best = compressionPreference.find((m) => accepted.includes(m)) ?? 'off'
  if (row?.setting !== best) {
    await sql.unsafe(`alter system set wal_compression = '${best}'`)
    await sql`select pg_reload_conf()`
  }
  return best
}

/** Puts wal_compression back to PostgreSQL's default (off); returns it. */
export async function resetWalCompression(sql: Sql): Promise<string> {
  await sql`alter system reset wal_compression`
  await sql`select pg_reload_conf()`
  return 'off'
}

/**
 * On a PostgreSQL of the operator's own: one warning at start for each setting at a value known
 * to hurt this table as it grows. The service starts regardless.
 */
export async function warnAboutServerSettings(sql: Sql, log: Log): Promise<void> {
  const rows = await sql<{ name: string; setting: string; bytes: string | null }[]>`
    select name, setting,
      case when unit = '8kB' then (setting::bigint * 8192)::text
           when unit = 'MB' then (setting::bigint * 1048576)::text end as bytes
    from pg_settings where name in ('wal_compression', 'max_wal_size')`
  const of = (name: string) => rows.find((r) => r.name === name)
  const compression = of('wal_compression')?.setting
  if (compression === 'off') {
    log.warn(
      'wal_compression is off: once a primary key of random ids outgrows shared_buffers, each new row writes about 5 KB of WAL (full-page images); set wal_compression = lz4 (or zstd) if your server is built with it (see docs/operations.md)',
    )
  } else if (compression === 'pglz' || compression === 'on') {
    log.warn(
      'wal_compression is pglz: it spends CPU on every full-page image and saves little on index pages of random ids; at 40 million rows the service was about half as fast with it as with off (BENCHMARKS.md, "A table that grows"); set wal_compression = lz4 (or zstd) if your server is built with it, else off (see docs/operations.md)',
      { wal_compression: compression },
    )
  }
  const maxWal = Number(of('max_wal_size')?.bytes ?? Number.NaN)
  if (maxWal < 2 * 2 ** 30) {
    log.warn(
      "max_wal_size is under 2 GB: under a steady stream of creates checkpoints come by WAL volume, and each one makes every page's next change a full-page image again; set max_wal_size to 8GB or more (see docs/operations.md)",
      { maxWalSizeMb: Math.round(maxWal / 2 ** 20) },
    )
  }
}

/**
 * Through a transaction pooler the service cannot set statement_timeout per session; the role or
 * database should carry the contract's 5 s. One warning at start when it does not.
 */
export async function warnWithoutStatementTimeout(sql: Sql, log: Log): Promise<void> {
  const [row] = await sql<{ ms: number }[]>`
    select setting::int * case unit when 's' then 1000 else 1 end as ms
    from pg_settings where name = 'statement_timeout'`
  const ms = row?.ms ?? 0
  if (ms === 0 || ms > limits.database.statement) {
    log.warn(
      "statement_timeout is off or over 5 s through the pooler; set it on the role or database: ALTER ROLE … SET statement_timeout = '5s'",
      { statementTimeoutMs: ms },
    )
  }
}

/**
 * The start-up warnings about the database: its statement_timeout through a transaction pooler
 * (`transactionPooler`, asked through `sql`), and the settings for a growing table on a DBA's
 * server (`serverSettings`: the embedded one gets them itself), asked of the server that takes
 * the writes: `writesUrl` (a Citus worker's own, through a connection of its own) when given,
 * else through `sql`.
 */
export async function warnAboutDatabase(
  sql: Sql,
  log: Log,
  {
    transactionPooler,
    serverSettings,
    writesUrl,
  }: { transactionPooler: boolean; serverSettings: boolean; writesUrl: string | undefined },
): Promise<void> {
  if (transactionPooler) await warnWithoutStatementTimeout(sql, log)
  if (!serverSettings) return
  const writesTo = writesUrl === undefined ? sql : createSql(writesUrl, log, { max: 1 })
  try {
    await warnAboutServerSettings(writesTo, log)
  } finally {
    if (writesTo !== sql) await writesTo.end({ timeout: 5 })
  }
}
