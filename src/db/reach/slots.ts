import type { Socket } from 'node:net'
import type { Sql } from 'postgres'
import type { Log } from '../../log.ts'
import { hostConnector } from './hosts.ts'
import { createSql, type SqlOptions } from './sql.ts'

/**
 * A connection of its own for one statement at a time, which its owner can cut loose: its socket
 * destroyed (its statements fail with the reason), and a fresh connection opened for the next.
 */
export type StatementSlot = {
  /** The slot's pool of one connection; a new one after each cut. */
  readonly sql: Sql
  /**
   * Destroys the slot's sockets and ends its pool, failing whatever it still holds (the
   * statement with `reason`, anything queued behind it), and gives the slot a new pool. Returns
   * how many sockets were open.
   */
  readonly cut: (reason: Error) => number
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
  const open = () => {
    const sockets = trackedSockets(connector)
    return { sockets, sql: createSql(url, log, { ...options, max: 1, socket: sockets.open }) }
  }
  return Array.from({ length: count }, () => {
    let current = open()
    return {
      get sql() {
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
      end: () => current.sql.end({ timeout: 5 }),
    }
  })
}
