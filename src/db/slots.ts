import { Socket } from 'node:net'
import type { Sql } from 'postgres'
import type { Log } from '../log.ts'
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

/** The driver's view of where to connect (`host` and `port` lists, or a Unix socket `path`). */
type Target = {
  readonly host: readonly string[]
  readonly port: readonly number[]
  readonly path?: string
  /** Seconds. */
  readonly connect_timeout?: number
}

/**
 * The driver's `socket` option, keeping hold of the sockets it opens so they can be destroyed:
 * the driver itself only ends a socket (a FIN that a partitioned peer never acknowledges), and
 * the kernel keeps retransmitting unacknowledged data for minutes. Hosts of a multi-host URL are
 * taken in turn, as the driver does for each of its connections.
 *
 * A socket is handed over once connected. The driver attaches its listeners only after the
 * promise settles, so an error while connecting (EMFILE, ECONNREFUSED) emitted before that had no
 * listener and ended the process; it now rejects the promise, and the driver fails the statement
 * with it. The driver starts its connect timer only after that too, so the timeout is kept here.
 */
function trackedSockets() {
  const live = new Set<Socket>()
  let next = 0
  return {
    open(target: Target): Promise<Socket> {
      // Over TLS the driver hands the socket to tls.connect and drops the listeners on it.
      for (const s of live) if (s.destroyed) live.delete(s)
      const socket = new Socket()
      live.add(socket)
      socket.once('close', () => live.delete(socket))
      const i = next++ % target.host.length
      const host = target.host[i] ?? 'localhost'
      const port = target.port[i] ?? target.port[0] ?? 5432
      const where = target.path ?? `${host}:${port}`
      return new Promise((resolve, reject) => {
        const fail = (err: Error) => {
          clearTimeout(timer)
          socket.off('connect', connected)
          socket.destroy()
          reject(err)
        }
        const timer = setTimeout(
          () =>
            fail(
              Object.assign(new Error(`connect CONNECT_TIMEOUT ${where}`), {
                code: 'CONNECT_TIMEOUT',
              }),
            ),
          (target.connect_timeout ?? 30) * 1000,
        )
        const closed = () =>
          fail(Object.assign(new Error(`connect ECONNRESET ${where}`), { code: 'ECONNRESET' }))
        const connected = () => {
          clearTimeout(timer)
          socket.off('error', fail)
          socket.off('close', closed)
          resolve(socket)
        }
        socket.once('error', fail)
        socket.once('close', closed)
        socket.once('connect', connected)
        if (target.path) socket.connect(target.path)
        else {
          socket.connect(port, host)
          // The driver names the host and port in its connection errors from these.
          Object.assign(socket, { host, port })
        }
      })
    },
    cut(reason: Error): number {
      let open = 0
      for (const s of live) {
        if (!s.destroyed) open++
        s.destroy(reason)
      }
      live.clear()
      return open
    },
  }
}

/** Opens `count` statement slots on `url`, each a pool of one connection. */
export function openStatementSlots(
  url: string,
  log: Log,
  count: number,
  options: Omit<SqlOptions, 'max' | 'socket'> = {},
): StatementSlot[] {
  const open = () => {
    const sockets = trackedSockets()
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
