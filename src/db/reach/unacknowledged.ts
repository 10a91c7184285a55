import { readFile } from 'node:fs/promises'
import type { Socket } from 'node:net'

/**
 * What the kernel holds sent on a socket and not yet acknowledged by the peer: the emulation of
 * libpq's `tcp_user_timeout` (TCP_USER_TIMEOUT), which Node cannot set. On a live connection the
 * peer's kernel acknowledges within a round trip, whatever its server is doing (a lock wait, a
 * slow flush); bytes still unacknowledged a quarter of a second later, and again after it, mean
 * nothing gets through: a silent partition. The kernel meanwhile retransmits at doubling
 * intervals (0.2, 0.6, 1.4, 3.0, 6.2 s after the send on a loopback), so that a 3-s partition can
 * hold a statement's answer for 6.2 s, past its creates' deadline.
 *
 * Read from Linux's `/proc/net/tcp` and `/proc/net/tcp6` (the `tx_queue` column, by the local and
 * remote port); elsewhere, or where they cannot be read (Deno 2.9 asks `--allow-all` for them),
 * nothing is ever reported and only the statement's own time (`limits.database.cutLoose`) cuts it loose.
 */

/** `local:remote` ports in hex, as the files write them, to bytes unacknowledged. */
type Queues = Map<string, number>

let unreadable = false

// One read serves every question asked within 100 ms of it (the slots stuck together, in a
// stall, ask together): the files list every TCP socket of the host's network, thousands on a
// busy one.
let lastRead: { readonly at: number; readonly queues: Promise<Queues | undefined> } | undefined

function currentQueues(): Promise<Queues | undefined> {
  const now = performance.now()
  if (lastRead === undefined || now - lastRead.at >= 100)
    lastRead = { at: now, queues: readQueues() }
  return lastRead.queues
}

async function readQueues(): Promise<Queues | undefined> {
  if (unreadable) return undefined
  const queues: Queues = new Map()
  let read = 0
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string
    try {
      text = await readFile(file, 'latin1')
    } catch {
      continue
    }
    read++
    // "  sl  local_address rem_address   st tx_queue:rx_queue ...", one socket a line.
    for (const line of text.split('\n')) {
      const fields = line.trim().split(/\s+/)
      const local = fields[1]
      const remote = fields[2]
      const queue = fields[4]
      if (local === undefined || remote === undefined || queue === undefined) continue
      const tx = Number.parseInt(queue.slice(0, queue.indexOf(':')), 16)
      if (!(tx > 0)) continue
      queues.set(
        `${local.slice(local.lastIndexOf(':') + 1)}:${remote.slice(remote.lastIndexOf(':') + 1)}`,
        tx,
      )
    }
  }
  if (read === 0) {
    unreadable = true
    return undefined
  }
  return queues
}

function keyOf(socket: Socket): string | undefined {
  const { localPort, remotePort } = socket
  if (localPort === undefined || remotePort === undefined) return undefined
  const hex = (port: number) => port.toString(16).toUpperCase().padStart(4, '0')
  return `${hex(localPort)}:${hex(remotePort)}`
}

/**
 * Whether any of `sockets` holds bytes the peer has not acknowledged, seen twice `apartMs`
 * apart: false at once where the kernel's tables cannot be read, or a socket is not TCP.
 */
export async function unacknowledged(
  sockets: () => readonly Socket[],
  apartMs = 250,
): Promise<boolean> {
  const held = (queues: Queues | undefined) => {
    const found = new Set<string>()
    if (queues === undefined) return found
    for (const socket of sockets()) {
      const key = keyOf(socket)
      if (key !== undefined && !socket.destroyed && queues.has(key)) found.add(key)
    }
    return found
  }
  const first = held(await currentQueues())
  if (first.size === 0) return false
  await new Promise((resolve) => setTimeout(resolve, apartMs).unref())
  const second = held(await currentQueues())
  for (const key of second) if (first.has(key)) return true
  return false
}
