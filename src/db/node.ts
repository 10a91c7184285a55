import type { Sql } from 'postgres'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'
import { createSql } from './reach/sql.ts'
import { connectFailure, withDeadline } from './reach/unavailable.ts'
import { hostUrls } from './reach/url.ts'

// Which node of a Citus cluster a server is, from its own metadata: where the tables are made
// and tokens live (the coordinator), and how to reach another node of the cluster.

/** What a node of a Citus cluster is, as its own metadata says; `undefined`: no Citus here. */
export type CitusNode =
  | { readonly role: 'coordinator' }
  | {
      readonly role: 'worker'
      /** Its own group in pg_dist_node. */
      readonly group: number
      /**
       * The coordinator (`host:port`) and its URL, `url` with the host and port of pg_dist_node's
       * group 0; undefined where its metadata names none.
       */
      readonly coordinator?: { readonly node: string; readonly url: string }
    }

/**
 * The URL of another node of the cluster: the first host of `url` with the host and port
 * pg_dist_node names it by (`host:port`), the same database, user and settings.
 */
export function nodeUrl(url: string, node: string): string {
  const first = hostUrls(url)?.[0]
  if (first === undefined) throw new Error('the database URL cannot be read')
  const at = node.lastIndexOf(':')
  const host = node.slice(0, at)
  first.hostname = host.includes(':') ? `[${host}]` : host
  first.port = node.slice(at + 1)
  first.searchParams.delete('target_session_attrs')
  return first.toString()
}

/**
 * Asks the server at `url` whether it is a Citus node, and which. A worker with synced metadata
 * (Citus 11+) runs distributed INSERT and SELECT itself, but DDL, `api_tokens` and the
 * migrations table live on the coordinator, which its metadata names.
 */
export async function citusNodeOf(url: string, log: Log): Promise<CitusNode | undefined> {
  const sql = createSql(url, log, { max: 1, applicationName: 'plant-store probe' })
  try {
    const [ext] = await sql<{ citus: boolean }[]>`
      select exists (select from pg_extension where extname = 'citus') as citus`.catch(
      // Said as the migrations say it: the first connection of a start is this one.
      (err: unknown) => {
        throw connectFailure(err)
      },
    )
    if (!ext?.citus) return undefined
    const [row] = await sql<{ group: number; host: string | null; port: number | null }[]>`
      select g.groupid as group, n.nodename as host, n.nodeport as port
      from pg_dist_local_group g
        left join pg_dist_node n on n.groupid = 0 and n.noderole = 'primary'`
    if (row === undefined || row.group === 0) return { role: 'coordinator' }
    if (row.host === null || row.port === null) return { role: 'worker', group: row.group }
    const node = `${row.host}:${row.port}`
    return { role: 'worker', group: row.group, coordinator: { node, url: nodeUrl(url, node) } }
  } finally {
    await sql.end({ timeout: 5 })
  }
}

/** Each Citus group's primary (`host:port`) as pg_dist_node names it now, read again often. */
export type CitusPrimaries = {
  /**
   * Group `group`'s primary now, or its last one while pg_dist_node names none active;
   * undefined for a group it never named.
   */
  readonly of: (group: number) => string | undefined
  readonly all: () => ReadonlyMap<number, string>
  /** Hears of each group whose primary changed: the new one, and the one before. */
  readonly onChange: (listener: (group: number, node: string, was: string) => void) => void
  readonly stop: () => Promise<void>
}

const readPrimaries = async (sql: Sql) =>
  new Map(
    (
      await sql<{ group: number; node: string }[]>`
        select groupid as group, nodename || ':' || nodeport as node
        from pg_dist_node where noderole = 'primary' and isactive`
    ).map((r) => [r.group, r.node] as const),
  )

/**
 * Follows pg_dist_node's primaries from the Citus node at `url` (a worker's metadata is synced
 * from the coordinator): read at once, then every `everyMs`. Patroni in Citus mode changes a
 * group's row when another member becomes its primary (a switchover, a failover), and the
 * coordinator's own row when the coordinator fails over; each change is logged once and handed
 * to the listeners. A read that fails (this node away) changes nothing.
 */
export async function followCitusPrimaries(
  url: string,
  log: Log,
  everyMs: number = limits.citus.primariesCheck,
): Promise<CitusPrimaries> {
  const sql = createSql(url, log, { max: 1, applicationName: 'plant-store nodes' })
  let current: ReadonlyMap<number, string>
  try {
    current = await readPrimaries(sql)
  } catch (err) {
    await sql.end({ timeout: 0 })
    throw err
  }
  const listeners: ((group: number, node: string, was: string) => void)[] = []
  // The groups pg_dist_node named no active primary for at the last read.
  let dropped = new Set<number>()
  let reading = false
  const timer = setInterval(async () => {
    if (reading) return
    reading = true
    try {
      const read = await withDeadline(readPrimaries(sql), Math.max(everyMs, 2000))
      const before = current
      const next = new Map(read)
      // A group that drops out of the active primaries (a failover under way, a node disabled)
      // keeps its last one: its creates go on being sent there, and held while it is away,
      // until pg_dist_node names a primary again.
      for (const [group, node] of before) {
        if (read.has(group)) continue
        next.set(group, node)
        if (!dropped.has(group))
          log.warn(
            'pg_dist_node names no active primary for a Citus group: its creates go on to its last one',
            { group, node },
          )
      }
      dropped = new Set([...before.keys()].filter((group) => !read.has(group)))
      current = next
      for (const [group, node] of read) {
        const was = before.get(group)
        if (was === undefined || was === node) continue
        log.info('pg_dist_node names a new primary for a Citus group', {
          group,
          node,
          was,
        })
        for (const listener of listeners) listener(group, node, was)
      }
    } catch (err) {
      log.debug("could not read pg_dist_node's primaries", { error: describeError(err) })
    } finally {
      reading = false
    }
  }, everyMs)
  timer.unref()
  return {
    of: (group) => current.get(group),
    all: () => current,
    onChange: (listener) => void listeners.push(listener),
    async stop() {
      clearInterval(timer)
      await sql.end({ timeout: 1 })
    },
  }
}
