import type { IncomingMessage } from 'node:http'
import type { UnavailableReason } from '../outcome.ts'
import type { Failure } from './errors.ts'
import type { Trace } from './trace-context.ts'

/** A successful answer: its status and JSON body. */
export type Reply = {
  readonly kind: 'reply'
  readonly status: number
  readonly body: unknown
}

/**
 * A successful answer that is not JSON (a page, a script, a style sheet): its media type, bytes
 * and caching. An `etag` lets a client revalidate with `If-None-Match` and get a 304.
 */
export type Content = {
  readonly kind: 'content'
  readonly type: string
  readonly body: Buffer
  readonly cacheControl: string
  readonly etag?: string
  /** Extra response headers, e.g. a page's Content-Security-Policy. */
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * What a handler may say beside its answer: headers the answer carries (RateLimit,
 * Token-Expires), and facts for the request's log line and metrics.
 */
export type Beside = {
  readonly headers?: Readonly<Record<string, string>>
  /** The name of the token that authenticated the request. */
  readonly tokenName?: string
  /** A 503 for the database: why (counted by reason), and what happened, for the log line. */
  readonly unavailable?: { readonly reason: UnavailableReason; readonly detail: string }
}

/**
 * What a handler returns: a reply, content, or an expected failure of the error table (a gap
 * in the database included: 50301 with `unavailable`), with what it says beside.
 */
export type Outcome = (Reply | Content | Failure) & Beside

/** What a handler is told of its request beside the request itself. */
export type RequestContext = {
  readonly requestId: string
  /** `performance.now()` when the request's handling began: its deadlines count from here. */
  readonly receivedAt: number
  /**
   * For a request sent with `Expect: 100-continue`: sends `100 Continue`. The body reader calls
   * it once every check before the body has passed, so a request refused by its headers gets
   * the final answer instead. `undefined` for other requests.
   */
  readonly sendContinue: (() => void) | undefined
  /** The client's address (behind a trusted proxy, the one it forwarded). */
  readonly client: string | undefined
  /** The `:name` segments of the route's pattern, decoded (router.ts). */
  readonly params: Readonly<Record<string, string>>
  /** The request's trace context (undefined with TRACE_CONTEXT=off): a statement's span links it. */
  readonly trace?: Trace | undefined
}

/** A route handler; it throws only for bugs and infrastructure faults. */
export type Handler = (req: IncomingMessage, ctx: RequestContext) => Outcome | Promise<Outcome>

/** Builds a 200-class reply. */
export function reply(body: unknown, status = 200): Reply {
  return { kind: 'reply', status, body }
}
