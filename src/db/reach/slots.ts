import type { Socket } from 'node:net'
import postgres, { type Sql } from 'postgres'
import { limits } from '../../limits.ts'
import type { Log, LogFields } from '../../log.ts'
import { DatabaseUnavailable } from '../../outcome.ts'
import { hostConnector } from './hosts.ts'
import { applicationName, createSql, type SqlOptions } from './sql.ts'
import { unacknowledged } from './unacknowledged.ts'

/**
 * A connection of its own for one statement at a time, which its owner can cut loose: its socket
 * destroyed (its statements fail with the reason), and a fresh connection opened for the next.
 */
export type StatementSlot = {
  /** The slot's pool of one connection; a new one after each cut. */
  readonly sql: Sql
  /**
   * The pool, for a statement: on a pool that has sent nothing yet (the slot's first, or the one
   * after a cut), `primeBackend` goes first: one round trip before the statement, which waits
   * for it (one statement per connection at a time, sql.ts).
   */
  readonly forStatement: () => Sql
  /**
   * Destroys the slot's sockets and ends its pool, failing whatever it still holds (the
   * statement with `reason`, anything queued behind it), and gives the slot a new pool. Returns
   * how many sockets were open.
   */
  readonly cut: (reason: Error) => number
  /** Whether the slot's connection holds bytes the server has not acknowledged (unacknowledged.ts). */
  readonly unacknowledged: () => Promise<boolean>
  /** Ends the slot's pool (at shutdown). */
  readonly end: () => Promise<void>
}

/**
 * The driver's `socket` option for one slot's pool, keeping hold of the sockets it opens so they
 * can be destroyed: the driver itself only ends a socket (a FIN that a partitioned peer never
 * acknowledges), and the kernel keeps retransmitting unacknowledged data for minutes. A cut also
 * stops a connection attempt still going through the URL's hosts.
 */
function trackedSockets(connector: ReturnType<typeof hostConnector>) {
  const live = new Set<Socket>()
  const attempts = new AbortController()
  const open = connector.hooks({
    signal: attempts.signal,
    opened(socket) {
      for (const s of live) if (s.destroyed) live.delete(s)
      live.add(socket)
      socket.once('close', () => live.delete(socket))
    },
    // Over TLS the secure socket is the driver's, and the one destroyed: destroying the one
    // under it as well would end the secure one twice over, once after the driver has let go.
    secured(raw, secure) {
      live.delete(raw)
      live.add(secure)
      secure.once('close', () => live.delete(secure))
    },
  })
  return {
    open,
    live: (): readonly Socket[] => [...live],
    cut(reason: Error): number {
      attempts.abort(reason)
      let open = 0
      for (const s of live) {
        if (!s.destroyed) open++
        // The driver may have dropped its listeners already; the error must not end the process.
        s.on('error', () => {})
        s.destroy(reason)
      }
      live.clear()
      return open
    },
  }
}

/**
 * The primer: readies a new connection's backend for the batch statements' memory, run once
 * before them. PostgreSQL's memory comes from the C library's `malloc`; glibc's gives memory back
 * to the system above its trim threshold (128 KiB at first, `mallopt(3)`), and a batch
 * statement's working memory goes past it: without this, whenever nothing long-lived happened to
 * sit above that memory in the heap, each statement grew the backend's heap with `brk` and gave it
 * back after, 4 to 5 system calls and as many fresh pages faulted in per statement, up to a fifth
 * of PostgreSQL's CPU for a create (BENCHMARKS.md, "The backend's heap"). One block of 1 MiB
 * allocated and freed raises both thresholds for the backend's life (to its size, and twice it),
 * and the heap keeps what the statements use: 1 MiB is above every batch's working memory (about
 * 150 KiB for a batch of one, under 1 MiB for one of `maxBatch`, measured on PostgreSQL 18), and
 * each slot's backend keeps at most 2 MiB of freed memory for its next statements. On another
 * allocator (musl) the server only runs one cheap statement more. Exported for the bench's floor,
 * which primes as the slots do.
 */
export function primer(sql: Sql): Promise<unknown> {
  // 1 KiB repeated 1,024 times, its size read without reading it: 1.6 ms, where `repeat('x',
  // 1048576)` and a `length` that counts its characters took 10 (one connection, PostgreSQL 18).
  // One round trip of its own: the statement behind it waits for its answer.
  return sql`select octet_length(repeat(repeat('x', 1024), 1024))`
}

/** Sends the primer on `sql`'s connection; `again` if the connection was gone (see below). */
function primeBackend(sql: Sql, again: () => void): void {
  primer(sql).catch((error: unknown) => {
    // The statement behind it meets the same trouble and reports it. Unless the server answered
    // the primer itself with an error (its backend lives on, and would answer the same again),
    // the connection it went to is gone (or was already, unknown to the driver, which hands the
    // news to the next statement): the pool's next statement sends the primer again.
    if (!(error instanceof postgres.PostgresError && error.severity === 'ERROR')) again()
  })
}

/**
 * Opens `count` statement slots on `url`, each a pool of one connection; where `current` is
 * given, each connection goes to the URL it names at the time (`hostConnector`).
 */
export function openStatementSlots(
  url: string,
  log: Log,
  count: number,
  { current, ...options }: Omit<SqlOptions, 'max' | 'socket'> & { current?: () => string } = {},
): StatementSlot[] {
  const connector = hostConnector(url, current)
  return Array.from({ length: count }, () => {
    // Whether the current pool still owes its primer (none sent yet, or the one sent failed
    // with its connection).
    let fresh = true
    // Primed once per pool: at the start, and after each cut (the batcher cuts a slot whose
    // connection was lost). A connection the driver reopens in the same pool (after its idle
    // timeout) goes unprimed: priming on every close let the primer take a dead connection's
    // last error in the statement's place, and the statement reconnect at once, which
    // test/faults/file-handles.test.ts catches as a create stored while out of handles.
    const open = () => {
      fresh = true
      const sockets = trackedSockets(connector)
      return { sockets, sql: createSql(url, log, { ...options, max: 1, socket: sockets.open }) }
    }
    let current = open()
    return {
      get sql() {
        return current.sql
      },
      forStatement() {
        if (fresh) {
          fresh = false
          primeBackend(current.sql, () => {
            fresh = true
          })
        }
        return current.sql
      },
      cut(reason: Error) {
        const old = current
        current = open()
        const sockets = old.sockets.cut(reason)
        // Whatever state the driver was in (connecting, waiting to reconnect), nothing is left
        // waiting in it: its queries fail, and it opens nothing more.
        old.sql.end({ timeout: 0 }).catch(() => {})
        return sockets
      },
      unacknowledged: () => unacknowledged(current.sockets.live),
      end: () => current.sql.end({ timeout: 5 }),
    }
  })
}

/**
 * What happens to a statement slot when its statement meets trouble, decided here and nowhere
 * else (the batcher only reports it):
 * - **stuck**: no answer for `limits.database.cutLoose` (past every deadline of the creates in
 *   it: a partition, where nothing comes until the kernel gives up, minutes later), or, sooner,
 *   from `limits.database.unacknowledged` on, what was sent still unacknowledged by the server's
 *   kernel (`silent`; Linux only, unacknowledged.ts): its socket is destroyed, which fails the
 *   statement with a connection error (sent again) and frees the slot, and a new connection is
 *   opened; logged once, with `where` (which database or node). The sooner cut is what lets a
 *   partition of a few seconds pass unseen: the kernel's own retransmissions back off, and the
 *   one after a 3-s partition comes 6.2 s after the send, past the deadline; a new connection
 *   gets through as soon as the network is back.
 * - **connection lost**: the slot starts afresh with a new pool, so that nothing the driver kept
 *   of the old connection outlives it.
 * - **read-only** (25006): the sessions leave that server (`leaveReadOnlyServer`).
 */
export type SlotPolicy = {
  readonly stuckAfterMs: number
  readonly silentAfterMs: number
  readonly silent: (slot: number) => Promise<boolean>
  readonly stuck: (slot: number, why: Stuck) => void
  readonly connectionLost: (slot: number) => void
  readonly readOnly: (slot: number) => void
}

/** Why a statement was found stuck: how long it had run, and whether the server's kernel had acknowledged it. */
export type Stuck = { readonly ms: number; readonly unacknowledged: boolean }

export function slotPolicy(
  slots: readonly StatementSlot[],
  log: Log,
  where: () => LogFields,
): SlotPolicy {
  const stuckAfterMs = limits.database.cutLoose
  const leave = leaveReadOnlyServer(log)
  return Object.freeze({
    stuckAfterMs,
    silentAfterMs: limits.database.unacknowledged,
    silent: (slot: number) => slots[slot]?.unacknowledged() ?? Promise.resolve(false),
    stuck(slot: number, { ms, unacknowledged }: Stuck) {
      const reason = new DatabaseUnavailable(
        unacknowledged
          ? `nothing sent to the database acknowledged for ${Math.round(ms)} ms; the connection was closed`
          : `no answer from the database for ${ms} ms; the connection was closed`,
      )
      const sockets = slots[slot]?.cut(Object.assign(reason, { code: 'ETIMEDOUT' })) ?? 0
      log.warn(
        unacknowledged
          ? 'the database acknowledged nothing of a statement sent to it: closed its connection and opening a new one'
          : 'no answer from the database past the deadlines of a statement: closed its connection and opening a new one',
        { ms: Math.round(ms), slot, sockets, ...where() },
      )
    },
    connectionLost(slot: number) {
      slots[slot]?.cut(new DatabaseUnavailable('the connection was lost'))
    },
    readOnly(slot: number) {
      const s = slots[slot]
      if (s !== undefined) leave(s.sql)
    },
  })
}

/**
 * What to do when a write meets a read-only server (25006): a standby, or an old primary that a
 * DNS name still points at. The pools keep their connections to it, so it ends them from the
 * server side (its sessions of this application, the one asking included), through the
 * connection that met it; the driver reconnects, to a writable server once there is one. At
 * most once a second.
 */
export function leaveReadOnlyServer(log: Log): (sql: Sql) => void {
  let last = Number.NEGATIVE_INFINITY
  return (sql) => {
    const now = performance.now()
    if (now - last < 1000) return
    last = now
    log.warn('a write met a read-only server; reconnecting')
    sql`
      select pg_terminate_backend(pid) from pg_stat_activity
      where usename = current_user and application_name = ${applicationName}`.catch(() => {
      // Ending this very session fails the query: the point of it.
    })
  }
}
