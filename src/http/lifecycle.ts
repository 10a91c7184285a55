import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Log } from '../log.ts'

// A server's life: listening on its address, and draining at shutdown.

/**
 * Listens on `port` of `host`; resolves with the base URL and the port bound. `exclusive`: in a
 * node:cluster worker, a port of the worker's own rather than one shared through the primary.
 */
export async function listen(
  server: Server,
  port: number,
  host: string,
  { exclusive = false } = {},
): Promise<{ url: string; port: number }> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen({ port, host, exclusive }, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const bound = (server.address() as AddressInfo).port
  return { url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`, port: bound }
}

/**
 * Stops accepting; lets requests in flight finish, closing each connection as it goes idle;
 * after `graceMs` closes whatever is left.
 */
export async function drain(server: Server, graceMs: number, log: Log): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()))
  const sweep = setInterval(() => server.closeIdleConnections(), 50)
  let timer: ReturnType<typeof setTimeout> | undefined
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), graceMs)
  })
  if ((await Promise.race([closed, late])) === 'late') {
    log.warn('requests still running at the end of the grace were cut off', { graceMs })
    server.closeAllConnections()
    await closed
  }
  clearInterval(sweep)
  clearTimeout(timer)
}
