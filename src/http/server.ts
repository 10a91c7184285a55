import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { DatabaseUnavailable } from '../db/unavailable.ts'
import { limits } from '../limits.ts'
import type { Log } from '../log.ts'
import { type Metrics, noMetrics } from '../metrics/metrics.ts'
import { errorTable, type Failure, failure, failureHeaders } from './errors.ts'
import { traceOf } from './trace-context.ts'
import type { Content, Handler, Outcome, Reply, RequestContext } from './types.ts'

const requestIdPattern = /^[A-Za-z0-9._-]{1,128}$/

/** Options of the HTTP adapter. */
export type HttpOptions = {
  readonly route: (method: string, path: string) => Handler | Failure
  readonly log: Log
  /** Hears of every request answered, and of every 503 for the database. */
  readonly metrics?: Pick<Metrics, 'requestAnswered' | 'unavailable'>
  /** Keep or start a W3C trace context per request (default true). */
  readonly traceContext?: boolean
}

/**
 * The HTTP adapter: assigns the request id, routes, turns every outcome (and every throw) into a
 * JSON response, and writes one log line per request.
 */
export function createHttpServer({
  route,
  log,
  metrics = noMetrics,
  traceContext = true,
}: HttpOptions): Server {
  const server = createServer(
    {
      headersTimeout: limits.http.headers,
      requestTimeout: limits.http.request,
      keepAliveTimeout: limits.http.keepAlive,
      // Node checks the two limits above only this often (30 s by default).
      connectionsCheckingInterval: 500,
    },
    (req, res) => {
      // handle() answers every outcome itself; this only keeps a fault in writing the answer
      // from becoming an unhandled rejection, which would end the process.
      handle(req, res, route, log, metrics, traceContext).catch((err: unknown) => {
        log.error('failed to answer a request', {
          error: err instanceof Error ? err.message : String(err),
        })
        res.destroy()
      })
    },
  )
  return server
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  route: HttpOptions['route'],
  log: Log,
  metrics: NonNullable<HttpOptions['metrics']>,
  traceContext: boolean,
): Promise<void> {
  const started = performance.now()
  const given = req.headers['x-request-id']
  const ctx: RequestContext = {
    requestId: typeof given === 'string' && requestIdPattern.test(given) ? given : randomUUID(),
    tokenName: undefined,
  }
  const method = req.method ?? 'GET'
  const url = req.url ?? '/'
  const q = url.indexOf('?')
  const path = q === -1 ? url : url.slice(0, q)

  const trace = traceContext ? traceOf(req.headers.traceparent) : undefined

  let outcome: Outcome
  // The route pattern, never the raw path: every unknown path is one label value.
  let routeLabel = 'unmatched'
  try {
    const target = route(method, path)
    if (typeof target === 'function' || target.code === 40501) routeLabel = path
    outcome = typeof target === 'function' ? await target(req, ctx) : target
  } catch (err) {
    if (err instanceof DatabaseUnavailable) {
      metrics.unavailable(err.reason)
      outcome = failure(50301, 'the database is unavailable; try again shortly')
      log.warn('database unavailable', { requestId: ctx.requestId, reason: err.message })
    } else {
      outcome = failure(50001, `unexpected fault; quote request id ${ctx.requestId}`)
      log.error('unexpected fault', {
        requestId: ctx.requestId,
        error: err instanceof Error ? (err.stack ?? err.message) : String(err),
      })
    }
  }

  const answer = outcome.kind === 'content' ? contentAnswer(req, outcome) : jsonAnswer(outcome)
  const { status, headers, body } = answer
  headers['x-request-id'] = ctx.requestId
  if (trace) headers.traceparent = `00-${trace.traceId}-${trace.spanId}-${trace.flags}`
  // A body left unread (refused early, or cut off at the size limit) is not drained: the
  // connection is closed after the response instead.
  if (!req.complete) headers.connection = 'close'
  res.writeHead(status, headers)
  res.end(body)

  const ms = performance.now() - started
  metrics.requestAnswered(method, routeLabel, status, ms / 1000)
  const level = status >= 500 ? (status === 503 ? 'warn' : 'error') : 'info'
  log[level]('request', {
    requestId: ctx.requestId,
    method,
    path,
    status,
    durationMs: Math.round(ms * 100) / 100,
    error: outcome.kind === 'failure' ? outcome.code : undefined,
    tokenName: ctx.tokenName,
    traceId: trace?.traceId,
    spanId: trace?.spanId,
    parentSpanId: trace?.parentId,
  })
}

type Answer = {
  readonly status: number
  readonly headers: Record<string, string | number>
  readonly body: string | Buffer
}

function jsonAnswer(outcome: Reply | Failure): Answer {
  const status = outcome.kind === 'reply' ? outcome.status : errorTable[outcome.code].status
  const body = JSON.stringify(
    outcome.kind === 'reply' ? outcome.body : { error: outcome.code, message: outcome.message },
  )
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    ...(outcome.kind === 'failure' ? failureHeaders(outcome) : {}),
  }
  return { status, headers, body }
}

// The opaque part of an entity tag: `W/"x"` and `"x"` compare equal under the weak comparison.
const opaqueTag = (tag: string) => (tag.startsWith('W/') ? tag.slice(2) : tag)

/**
 * Whether an If-None-Match field names `etag`, by the weak comparison that RFC 9110 13.1.2
 * prescribes for it: a proxy may hand on a weak `W/"…"` form of the tag it was sent.
 */
export function matchesIfNoneMatch(field: string | undefined, etag: string): boolean {
  if (field === undefined) return false
  const wanted = opaqueTag(etag)
  return field.split(',').some((tag) => {
    const t = tag.trim()
    return t === '*' || opaqueTag(t) === wanted
  })
}

// A request whose If-None-Match names the content's ETag gets 304 and no body (RFC 9110 13.1.2).
function contentAnswer(req: IncomingMessage, content: Content): Answer {
  const { etag } = content
  const fresh = etag !== undefined && matchesIfNoneMatch(req.headers['if-none-match'], etag)
  const headers: Record<string, string | number> = {
    'content-type': content.type,
    'cache-control': content.cacheControl,
    'x-content-type-options': 'nosniff',
    ...(etag === undefined ? {} : { etag }),
    ...content.headers,
  }
  if (fresh) return { status: 304, headers, body: '' }
  return {
    status: 200,
    headers: { ...headers, 'content-length': content.body.length },
    body: content.body,
  }
}
