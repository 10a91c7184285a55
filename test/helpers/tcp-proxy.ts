import { connect, createServer, type Server, type Socket } from 'node:net'

/** A TCP proxy in front of PostgreSQL that a test can cut and restore: a real outage. */
export type TcpProxy = {
  /** The database URL, rewritten to go through the proxy. */
  readonly url: string
  /** Drops every connection and refuses new ones. */
  readonly cut: () => Promise<void>
  /** Accepts connections again, on the same port. */
  readonly restore: () => Promise<void>
  readonly close: () => Promise<void>
}

/** Starts a proxy to the host and port of `databaseUrl`. */
export async function startTcpProxy(databaseUrl: string): Promise<TcpProxy> {
  const target = new URL(databaseUrl)
  const sockets = new Set<Socket>()
  let server: Server | undefined
  let port = 0

  async function listen(): Promise<void> {
    server = createServer((client) => {
      const upstream = connect(Number(target.port || 5432), target.hostname)
      for (const s of [client, upstream]) {
        sockets.add(s)
        s.on('close', () => sockets.delete(s))
        s.on('error', () => {
          client.destroy()
          upstream.destroy()
        })
      }
      client.pipe(upstream)
      upstream.pipe(client)
    })
    await new Promise<void>((resolve) => server?.listen(port, '127.0.0.1', resolve))
    const address = server.address()
    if (typeof address === 'object' && address) port = address.port
  }

  async function cut(): Promise<void> {
    const closing = new Promise<void>((resolve) =>
      server ? server.close(() => resolve()) : resolve(),
    )
    for (const s of sockets) s.destroy()
    await closing
    server = undefined
  }

  await listen()
  const url = new URL(databaseUrl)
  url.port = String(port)
  return { url: url.toString(), cut, restore: listen, close: cut }
}
