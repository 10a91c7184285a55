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
 * The SQL of the query a frontend chunk starts with, if it starts with one: a Query's or a
 * Parse's text, or for a Bind the text its statement was parsed with (`prepared`).
 */
function queryStarting(chunk: Buffer, prepared: ReadonlyMap<string, string>): string | undefined {
  if (chunk.length < 6) return undefined
  const name = (start: number) => chunk.toString('utf8', start, chunk.indexOf(0, start))
  switch (chunk[0]) {
    case 0x51:
      return name(5)
    case 0x50:
      return name(chunk.indexOf(0, 5) + 1)
    case 0x42:
      // Bind: the portal's name, then the statement's.
      return prepared.get(name(chunk.indexOf(0, 5) + 1))
    default:
      return undefined
  }
}

/**
 * Calls `onQuery` when the frontend stream fed to the returned function reaches its first
 * Parse ('P') or Query ('Q') message. Messages before the StartupMessage have no type byte.
 */
function watchForFirstQuery(onQuery: () => void): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0)
  let untyped = true
  let done = false
  return (chunk) => {
    if (done) return
    pending = Buffer.concat([pending, chunk])
    for (;;) {
      const header = untyped ? 4 : 5
      if (pending.length < header) return
      if (!untyped && (pending[0] === 0x50 || pending[0] === 0x51)) {
        done = true
        onQuery()
        return
      }
      const length = pending.readInt32BE(untyped ? 0 : 1) + (untyped ? 0 : 1)
      if (pending.length < length) return
      if (untyped && !(length >= 8 && negotiationCodes.has(pending.readInt32BE(4)))) untyped = false
      pending = pending.subarray(length)
    }
  }
}

/**
 * Calls `onQuery` with the SQL of each Parse ('P') or Query ('Q') message in the frontend stream
 * fed to the returned function, and keeps in `prepared` each statement's SQL by its name, which a
 * later Bind names. Messages before the StartupMessage have no type byte.
 */
function recordQueries(
  onQuery: (sql: string) => void,
  prepared: Map<string, string>,
): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0)
  let untyped = true
  return (chunk) => {
    pending = Buffer.concat([pending, chunk])
    for (;;) {
      const header = untyped ? 4 : 5
      if (pending.length < header) return
      const length = pending.readInt32BE(untyped ? 0 : 1) + (untyped ? 0 : 1)
      if (pending.length < length) return
      if (untyped) {
        if (!(length >= 8 && negotiationCodes.has(pending.readInt32BE(4)))) untyped = false
      } else if (pending[0] === 0x51) {
        onQuery(pending.toString('utf8', 5, pending.indexOf(0, 5)))
      } else if (pending[0] === 0x50) {
        // Parse: the statement's name, then its text, each ended by a zero byte.
        const text = pending.indexOf(0, 5) + 1
        const sql = pending.toString('utf8', text, pending.indexOf(0, text))
        prepared.set(pending.toString('utf8', 5, text - 1), sql)
        onQuery(sql)
      }
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
      const prepared = new Map<string, string>()
      client.on(
        'data',
        recordQueries((sql) => sent.push(sql), prepared),
      )
      for (const s of [client, upstream]) {
        sockets.add(s)
        s.on('close', () => sockets.delete(s))
        s.on('error', destroyBoth)
      }
      // Registered before the pipe: the chunk with the query meets a destroyed upstream. The
      // first connection to send one cuts; the others' watches then do nothing.
      if (cutAtQuery)
        client.on(
          'data',
          watchForFirstQuery(() => {
            const onQuery = cutAtQuery
            cutAtQuery = undefined
            onQuery?.()
          }),
        )
      // With `loseNextAnswer` armed: the first query seen that it names (a chunk starting with
      // Parse, Bind of a prepared statement, or Query, the connection being idle) has its answer
      // dropped, and both ends cut. Registered after `recordQueries`, which has read the chunk's
      // Parse, if any, by then.
      let answerOfQuery: ((chunk: Buffer) => boolean) | undefined
      client.on('data', (chunk: Buffer) => {
        if (loseAnswer === undefined || answerOfQuery !== undefined) return
        const sql = queryStarting(chunk, prepared)
        if (sql !== undefined && loseAnswer.of(sql)) answerOfQuery = watchForReady()
      })
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
