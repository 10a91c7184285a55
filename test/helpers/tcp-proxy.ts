import { connect, createServer, type Server, type Socket } from 'node:net'
import { Transform } from 'node:stream'

/** A TCP proxy in front of PostgreSQL that a test can cut and restore: a real outage. */
export type TcpProxy = {
  /** The database URL, rewritten to go through the proxy. */
  readonly url: string
  /** Drops every connection and refuses new ones. */
  readonly cut: () => Promise<void>
  /** Accepts connections again, on the same port. */
  readonly restore: () => Promise<void>
  /**
   * Cuts (as `cut` does) when a connection opened from now on sends its first query after
   * start-up (its first Parse or Query message): the database goes away while the driver sets a
   * connection up. Every connection opened meanwhile is watched, not only the next one: another
   * that reconnects at the same moment (a LISTEN session) would otherwise carry the watch while
   * the next one runs its query to its end. Resolves once it has cut.
   */
  readonly cutAtFirstQuery: () => Promise<void>
  /**
   * Stops passing bytes either way, on every connection and on new ones, without closing any:
   * a database that stops answering (a network that drops packets). `cut` ends it.
   */
  readonly freeze: () => void
  /**
   * The next query sent on any connection whose SQL `of` accepts (any, by default) reaches the
   * server, which runs it to its end (and commits it); its answer is dropped and that connection
   * cut: the client cannot tell whether it committed. Resolves once it has cut. Without `of` the
   * query may be one the client runs of its own accord meanwhile (a token reload on a
   * notification), not the one the test sends.
   */
  readonly loseNextAnswer: (of?: (sql: string) => boolean) => Promise<void>
  /**
   * What each connection accepted so far has sent, in order: the text of every Parse and Query
   * message (a prepared statement's later Binds name it only, and are not listed).
   */
  readonly queries: () => readonly (readonly string[])[]
  /** Sends new connections to the host and port of `databaseUrl`, as a changed DNS name would. */
  readonly retarget: (databaseUrl: string) => void
  readonly close: () => Promise<void>
}

// The SSLRequest and GSSENCRequest codes: answered with one byte, then the StartupMessage follows.
const negotiationCodes = new Set([80877103, 80877104])

/**
 * Calls `onQuery` for each Parse ('P'), Bind ('B') or Query ('Q') message in the frontend stream
 * fed to the returned function: its type, its SQL (a Bind's is the text its prepared statement
 * was parsed with, earlier on the same stream), and whether it began a chunk (the connection was
 * idle until it came). Messages before the StartupMessage have no type byte.
 */
function readQueries(
  onQuery: (type: number, sql: string, beganChunk: boolean) => void,
): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0)
  let untyped = true
  // Whether the message at the head of `pending` began a chunk.
  let headBeganChunk = true
  const prepared = new Map<string, string>()
  return (chunk) => {
    if (pending.length === 0) headBeganChunk = true
    pending = Buffer.concat([pending, chunk])
    for (;;) {
      const header = untyped ? 4 : 5
      if (pending.length < header) return
      const length = pending.readInt32BE(untyped ? 0 : 1) + (untyped ? 0 : 1)
      if (pending.length < length) return
      // A zero-ended string of the message from `at`, and where the next field begins.
      const text = (at: number): [string, number] => {
        const end = pending.indexOf(0, at)
        return [pending.toString('utf8', at, end), end + 1]
      }
      const type = pending[0] ?? 0
      if (untyped) {
        if (!(length >= 8 && negotiationCodes.has(pending.readInt32BE(4)))) untyped = false
      } else if (type === 0x51) {
        onQuery(type, text(5)[0], headBeganChunk)
      } else if (type === 0x50) {
        // Parse: the statement's name, then its text.
        const [name, next] = text(5)
        const [sql] = text(next)
        prepared.set(name, sql)
        onQuery(type, sql, headBeganChunk)
      } else if (type === 0x42) {
        // Bind: the portal's name, then the statement's.
        const [statement] = text(text(5)[1])
        onQuery(type, prepared.get(statement) ?? '', headBeganChunk)
      }
      headBeganChunk = false
      pending = pending.subarray(length)
    }
  }
}

/**
 * Whether the backend stream fed to the returned function has reached a ReadyForQuery ('Z')
 * message: the end of a query's answer. The stream starts at a message boundary.
 */
function watchForReady(): (chunk: Buffer) => boolean {
  let pending = Buffer.alloc(0)
  return (chunk) => {
    pending = Buffer.concat([pending, chunk])
    for (;;) {
      if (pending.length < 5) return false
      if (pending[0] === 0x5a) return true
      const length = pending.readInt32BE(1) + 1
      if (pending.length < length) return false
      pending = pending.subarray(length)
    }
  }
}

/** Starts a proxy on 127.0.0.1 to the host and port of `databaseUrl`. */
export async function startTcpProxy(databaseUrl: string): Promise<TcpProxy> {
  let target = new URL(databaseUrl)
  const sockets = new Set<Socket>()
  let server: Server | undefined
  let port = 0
  let cutAtQuery: (() => void) | undefined
  let frozen = false
  let loseAnswer: { of: (sql: string) => boolean; lost: () => void } | undefined
  const queries: string[][] = []

  async function listen(): Promise<void> {
    server = createServer((client) => {
      const upstream = connect(Number(target.port || 5432), target.hostname)
      const destroyBoth = () => {
        client.destroy()
        upstream.destroy()
      }
      const sent: string[] = []
      queries.push(sent)
      // With `cutAtFirstQuery` armed as it opens, the connection cuts at its first query; the
      // first connection to send one cuts, the others' then do nothing. With `loseNextAnswer`
      // armed: the first query it names that begins a chunk (the connection idle until then) has
      // its answer dropped, and both ends cut. Read before the pipe (registered first): the chunk
      // with the query meets a destroyed upstream, and the watch for its answer is set before the
      // query goes on.
      const cutsAtFirstQuery = cutAtQuery !== undefined
      let queried = false
      let answerOfQuery: ((chunk: Buffer) => boolean) | undefined
      client.on(
        'data',
        readQueries((type, sql, beganChunk) => {
          if (type !== 0x42) sent.push(sql)
          if (cutsAtFirstQuery && !queried) {
            const onQuery = cutAtQuery
            cutAtQuery = undefined
            onQuery?.()
          }
          queried = true
          if (beganChunk && answerOfQuery === undefined && loseAnswer?.of(sql))
            answerOfQuery = watchForReady()
        }),
      )
      for (const s of [client, upstream]) {
        sockets.add(s)
        s.on('close', () => sockets.delete(s))
        s.on('error', destroyBoth)
      }
      const answers = new Transform({
        transform(chunk: Buffer, _encoding, done) {
          if (answerOfQuery !== undefined && loseAnswer !== undefined && answerOfQuery(chunk)) {
            const lost = loseAnswer.lost
            loseAnswer = undefined
            destroyBoth()
            lost()
            return done()
          }
          done(null, chunk)
        },
      })
      if (frozen) return
      client.pipe(upstream)
      upstream.pipe(answers).pipe(client)
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
    frozen = false
  }

  function freeze(): void {
    frozen = true
    for (const s of sockets) {
      s.unpipe()
      s.pause()
    }
  }

  await listen()
  // The proxy listens on loopback, whatever host the database itself is on.
  const url = new URL(databaseUrl)
  url.hostname = '127.0.0.1'
  url.port = String(port)
  return {
    url: url.toString(),
    cut,
    restore: listen,
    freeze,
    cutAtFirstQuery: () =>
      new Promise<void>((resolve) => {
        cutAtQuery = () => void cut().then(resolve)
      }),
    loseNextAnswer: (of = () => true) =>
      new Promise<void>((resolve) => {
        loseAnswer = { of, lost: resolve }
      }),
    queries: () => queries,
    retarget: (url) => {
      target = new URL(url)
    },
    close: cut,
  }
}
