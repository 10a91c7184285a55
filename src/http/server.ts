import { randomUUID } from 'node:crypto'
import {
  createServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
  STATUS_CODES,
} from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { type Clock, systemClock } from '../clock.ts'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'
import { type Metrics, noMetrics } from '../metrics/metrics.ts'
import type { Spans } from '../tracing/spans.ts'
import { contentAnswer, jsonAnswer } from './answer.ts'
import { bodyUnread, releaseTakenRequest } from './body.ts'
import { failure } from './errors.ts'
import { clientAddress } from './rate-limit.ts'
import { pathOf, type Routed } from './router.ts'
import { type Trace, traceOf } from './trace-context.ts'
import type { Outcome, RequestContext } from './types.ts'

const requestIdPattern = new RegExp(`^[A-Za-z0-9._-]{1,${limits.http.requestIdLength}}$`)

/** Options of the HTTP adapter. */
export type HttpOptions = {
  readonly route: (method: string, path: string) => Routed
  readonly log: Log
  /** Hears of every request answered, and of every 503 for the database. */
  readonly metrics?: Pick<Metrics, 'requestAnswered' | 'unavailable'>
  /** Keep or start a W3C trace context per request (default true). */
  readonly traceContext?: boolean
  /** Export a span per request (OTEL_EXPORTER_OTLP_ENDPOINT); needs `traceContext`. */
  readonly spans?: Spans | undefined
  /** Open connections at most; more are closed as soon as they are accepted. */
  readonly maxConnections?: number | undefined
  /** Proxies whose `X-Forwarded-For` names the client (TRUSTED_PROXIES). */
  readonly trustedProxies?: ReadonlySet<string>
  /** The instance is leaving (SIGTERM): every answer closes its connection. */
  readonly leaving?: () => boolean
  /** The time a request is received at (its deadlines count from it) and answered. */
  readonly clock?: Clock
}

/**
 * The requests of one connection. Node runs pipelined requests at once and goes on running them
 * after an answer that closes the connection; here they run one at a time, in order, and none
 * runs after an answer that closes the connection (RFC 9112 §9.3, §9.6).
 */
type Connection = {
  /** A request of this connection is running, or its answer is not yet handed to the system. */
  busy: boolean
  /** Requests pipelined behind it, at most `limits.http.pipelined`. */
  readonly waiting: [IncomingMessage, ServerResponse][]
  /** An answer closes the connection: nothing more of it is run. */
  closing: boolean
  /** The answer being made, from its request's run until it is handed to the system. */
  answering: ServerResponse | undefined
}
const connectionOf = Symbol('plant-store connection')

/** `res` is handed to the system: the connection is making no answer now. */
function handedOver(conn: Connection, res: ServerResponse): void {
  if (conn.answering === res) conn.answering = undefined
}

/** Nothing more of the connection runs: what waits is dropped, what comes is never run. */
function closeAfterThis(conn: Connection): void {
  conn.closing = true
  conn.waiting.length = 0
}
// The bytes read from a connection when its last answer was handed over.
const bytesAnswered = Symbol('plant-store bytes read at the last answer')
type Tracked = { [connectionOf]?: Connection; [bytesAnswered]?: number }

/**
 * The HTTP adapter: assigns the request id, routes, turns every outcome (and every throw) into a
 * JSON response, and writes one log line per request.
 */
export function createHttpServer({
  route,
  log,
  metrics = noMetrics,
  traceContext = true,
  spans,
  maxConnections,
  trustedProxies = new Set(),
  leaving = () => false,
  clock = systemClock,
}: HttpOptions): Server {
  const accept = inOrder({
    route,
    log,
    metrics,
    traceContext,
    spans,
    trustedProxies,
    leaving,
    clock,
  })
  const server = createServer(
    {
      headersTimeout: limits.http.headers,
      requestTimeout: limits.http.request,
      keepAliveTimeout: limits.http.keepAlive,
      // Node checks the two limits above only this often (30 s by default).
      connectionsCheckingInterval: 500,
      // Node answers a request without Host 400 itself and then runs a request pipelined behind
      // it; handle() refuses it instead, in its turn, and closes the connection.
      requireHostHeader: false,
    },
    accept,
  )
  // A connection on which no byte moves either way for this long is closed: above all one whose
  // client does not read the answers it asked for.
  server.timeout = limits.http.stalled
  if (maxConnections !== undefined) server.maxConnections = maxConnections
  // Expect: 100-continue: the request runs as any other; the body reader sends 100 Continue once
  // the checks before the body have passed, so a refusal by the headers is the final answer.
  server.on('checkContinue', accept)
  guardConnections(server, log, clock)
  return server
}

/**
 * Runs the requests of each connection one at a time, in order: the next once the answer before
 * it is handed to the system, none after an answer that closes the connection, at most
 * `limits.http.pipelined` waiting (more: the running request's answer closes the connection).
 */
function inOrder(requests: RequestHandling): (req: IncomingMessage, res: ServerResponse) => void {
  const run = (conn: Connection, req: IncomingMessage, res: ServerResponse) => {
    conn.busy = true
    conn.answering = res
    // Anonymous: tsx names each named closure as it is made (esbuild's keepNames), a
    // defineProperty on every request.
    res.once('finish', () => handedOver(conn, res))
    // The next request of the connection runs once this answer is handed to the system (or
    // the connection is gone): an answer the client does not read holds the rest back.
    res.once('close', () => {
      handedOver(conn, res)
      ;(req.socket as typeof req.socket & Tracked)[bytesAnswered] = req.socket.bytesRead
      conn.busy = false
      const next = conn.closing ? undefined : conn.waiting.shift()
      if (next) run(conn, next[0], next[1])
    })
    // handle() answers every outcome itself; this only keeps a fault in writing the answer
    // from becoming an unhandled rejection, which would end the process.
    handle(req, res, conn, requests).catch((err: unknown) => {
      requests.log.error('failed to answer a request', { error: describeError(err) })
      res.destroy()
    })
  }
  return (req, res) => {
    const socket = req.socket as typeof req.socket & Tracked
    let conn = socket[connectionOf]
    if (conn === undefined) {
      conn = { busy: false, waiting: [], closing: false, answering: undefined }
      socket[connectionOf] = conn
    }
    // Behind an answer that closes the connection: never run, never answered.
    if (conn.closing) return
    if (!conn.busy) return run(conn, req, res)
    if (conn.waiting.length < limits.http.pipelined) {
      conn.waiting.push([req, res])
      return
    }
    closeAfterThis(conn)
  }
}

/**
 * What never reaches the routes: Node's parser's refusals (bad framing: 400; headers too large:
 * 431; too slow: 408), a request still arriving when its connection has been silent for
 * `limits.http.stalled` (408), a connection silent that long otherwise (closed), and accept()
 * failing (EMFILE: out of file handles), which must not end the process. A refused connection
 * closes after the answer, and nothing it still holds is run.
 */
function guardConnections(server: Server, log: Log, clock: Clock): void {
  const refuse = (socket: Duplex, status: number, cause: string) => {
    const tracked = socket as Duplex & Tracked & { remoteAddress?: string }
    const conn = tracked[connectionOf]
    if (conn) closeAfterThis(conn)
    const requestId = refuseOn(socket, status)
    log.info('request', { requestId, client: tracked.remoteAddress, status, parserError: cause })
  }
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // An answer already begun cannot be followed by a refusal on the same connection.
    const begun = (socket as Duplex & Tracked)[connectionOf]?.answering?.headersSent === true
    if (err.code === 'ECONNRESET' || !socket.writable || begun) {
      socket.destroy()
      return
    }
    const status =
      err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400
    refuse(socket, status, err.code ?? 'unknown')
  })
  server.on('timeout', (socket: Socket) => {
    const tracked = socket as Socket & Tracked
    const current = tracked[connectionOf]?.answering
    // After an answer that closes the connection, what the client still sends is never read.
    const answered = tracked[connectionOf]?.closing === true
    // Without an answer in progress, a request is arriving if bytes came after the last answer;
    // otherwise this is the idle keep-alive connection's own time-out.
    const arriving =
      !answered &&
      (current ? !current.headersSent : socket.bytesRead > (tracked[bytesAnswered] ?? 0))
    if (arriving && socket.writable) refuse(socket, 408, 'request stalled')
    else socket.destroy()
  })
  let lastAcceptError = Number.NEGATIVE_INFINITY
  server.on('error', (err: NodeJS.ErrnoException) => {
    const now = clock.now()
    if (now - lastAcceptError < 1000) return
    lastAcceptError = now
    log.warn('a connection could not be accepted', { error: err.code ?? describeError(err) })
  })
}

/** What handling a request needs from the server's options, its defaults applied. */
type RequestHandling = Required<
  Pick<
    HttpOptions,
    'route' | 'log' | 'metrics' | 'traceContext' | 'trustedProxies' | 'leaving' | 'clock'
  >
> &
  Pick<HttpOptions, 'spans'>

/**
 * One request, start to end: the Host check, the request id, the route, the outcome (a throw
 * made 500), the answer, the metrics and the log line.
 */
async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  conn: Connection,
  handling: RequestHandling,
): Promise<void> {
  const { log, metrics, traceContext, spans, trustedProxies, leaving, clock } = handling
  const started = clock.now()
  // HTTP/1.1 requires Host (RFC 9112 §3.2); Node's own check is off (see createHttpServer).
  if (req.headers.host === undefined && req.httpVersion === '1.1')
    return refuseNoHost(req, res, conn, log)
  const given = req.headers['x-request-id']
  const requestId = typeof given === 'string' && requestIdPattern.test(given) ? given : randomUUID()
  const client = clientAddress(
    req.socket.remoteAddress,
    req.headers['x-forwarded-for'],
    trustedProxies,
  )
  const method = req.method ?? 'GET'
  const path = pathOf(req.url ?? '/')

  const span = spans?.request(req.headers.traceparent, {
    method,
    path,
    client,
    userAgent: req.headers['user-agent'],
    httpVersion: req.httpVersion,
    serverPort: req.socket.localPort,
  })
  const trace = span ? span.trace : traceContext ? traceOf(req.headers.traceparent) : undefined
  const ctx: Omit<RequestContext, 'params'> = {
    receivedAt: started,
    requestId,
    sendContinue: req.headers.expect === undefined ? undefined : () => res.writeContinue(),
    client,
    trace,
  }
  const { outcome, routeLabel } = await outcomeOf(req, method, path, ctx, handling)
  // A gap in the database: counted by why. The request's own line says what happened; a gap
  // has a warning of its own when it begins and ends (plants/gaps.ts), a full disk one more.
  if (outcome.unavailable) metrics.unavailable(outcome.unavailable.reason)

  const status = writeAnswer(req, res, conn, outcome, requestId, trace, leaving)
  const ms = clock.now() - started
  metrics.requestAnswered(method, routeLabel, status, ms / 1000)
  span?.end(status, routeLabel, outcome.kind === 'failure' ? outcome.code : undefined)
  // A 503 is an episode's (a gap, a full disk, readiness, the instance leaving), whose own lines
  // are the warnings, with its counts: at LOG_LEVEL=warn, no line per request refused.
  const level = status >= 500 && status !== 503 ? 'error' : 'info'
  log[level]('request', {
    requestId,
    client,
    method,
    path:
      path.length > limits.http.loggedPathLength
        ? `${path.slice(0, limits.http.loggedPathLength)}…`
        : path,
    status,
    durationMs: Math.round(ms * 100) / 100,
    error: outcome.kind === 'failure' ? outcome.code : undefined,
    reason: outcome.unavailable?.detail,
    tokenName: outcome.tokenName,
    traceId: trace?.traceId,
    spanId: trace?.spanId,
    parentSpanId: trace?.parentId,
  })
}

/** A request of HTTP/1.1 without Host: 400, no body, and the connection closed. */
function refuseNoHost(req: IncomingMessage, res: ServerResponse, conn: Connection, log: Log) {
  closeAfterThis(conn)
  const requestId = randomUUID()
  res.writeHead(400, {
    connection: 'close',
    'content-length': 0,
    'x-content-type-options': 'nosniff',
    'x-request-id': requestId,
  })
  res.end()
  log.info('request', {
    requestId,
    client: req.socket.remoteAddress,
    status: 400,
    parserError: 'no Host',
  })
}

/**
 * The route's outcome for the request, and the route's pattern (never the raw path: every
 * unknown path is one label value). Only faults are thrown: an expected failure, a gap in the
 * database included, is an outcome; a throw is answered 500 (50001) and logged with its stack.
 */
async function outcomeOf(
  req: IncomingMessage,
  method: string,
  path: string,
  ctx: Omit<RequestContext, 'params'>,
  { route, log }: RequestHandling,
): Promise<{ outcome: Outcome; routeLabel: string }> {
  let routeLabel = 'unmatched'
  try {
    const { target, pattern, params } = route(method, path)
    routeLabel = pattern ?? 'unmatched'
    // A literal, not `{ ...ctx, params }`: on Node 20 an object spread made per request
    // survived scavenges and was promoted, about 170 bytes a create (BENCHMARKS.md, "What
    // survives a scavenge").
    const context: RequestContext = {
      requestId: ctx.requestId,
      receivedAt: ctx.receivedAt,
      sendContinue: ctx.sendContinue,
      client: ctx.client,
      params,
      trace: ctx.trace,
    }
    const outcome = typeof target === 'function' ? await target(req, context) : target
    return { outcome, routeLabel }
  } catch (err) {
    log.error('unexpected fault', {
      requestId: ctx.requestId,
      error: describeError(err, { stack: true }),
    })
    return {
      outcome: failure(50001, `unexpected fault; quote request id ${ctx.requestId}`),
      routeLabel,
    }
  }
}

/** Writes `outcome` as the response, with the headers every answer carries; its status. */
function writeAnswer(
  req: IncomingMessage,
  res: ServerResponse,
  conn: Connection,
  outcome: Outcome,
  requestId: string,
  trace: Trace | undefined,
  leaving: () => boolean,
): number {
  const answer = outcome.kind === 'content' ? contentAnswer(req, outcome) : jsonAnswer(outcome)
  const { status, headers, body } = answer
  if (outcome.headers) Object.assign(headers, outcome.headers)
  headers['x-request-id'] = requestId
  if (trace) headers.traceparent = `00-${trace.traceId}-${trace.spanId}-${trace.flags}`
  // A body left unread (refused early, or cut off at the size limit) is not drained: the
  // connection is closed after the response instead. An instance that is leaving closes each
  // connection after its next answer: the client (a balancer) opens its next one elsewhere.
  if (bodyUnread(req) || conn.closing || leaving()) headers.connection = 'close'
  res.writeHead(status, headers)
  res.end(body)
  releaseTakenRequest(req)
  if (headers.connection === 'close' || !res.shouldKeepAlive) closeAfterThis(conn)
  return status
}

/**
 * Writes a bare refusal (no body, `Connection: close`, the headers every answer carries) on a
 * connection and ends it; returns the request id it carries.
 */
function refuseOn(socket: Duplex, status: number): string {
  const requestId = randomUUID()
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\nX-Content-Type-Options: nosniff\r\nX-Request-Id: ${requestId}\r\n\r\n`,
  )
  return requestId
}
