import type { IncomingMessage } from 'node:http'
import type { Failure } from './errors.ts'

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

/** What a handler returns: a reply, content, or an expected failure of the error table. */
export type Outcome = Reply | Content | Failure

/** Per-request facts that end up in the request's log line. */
export type RequestContext = {
  readonly requestId: string
  /** `performance.now()` when the request's handling began: its deadlines count from here. */
  readonly receivedAt: number
  tokenName: string | undefined
  /**
   * For a request sent with `Expect: 100-continue`: sends `100 Continue`. The body reader calls
   * it once every check before the body has passed, so a request refused by its headers gets
   * the final answer instead. `undefined` for other requests.
   */
  readonly sendContinue: (() => void) | undefined
  /** The client's address (behind a trusted proxy, the one it forwarded). */
  readonly client: string | undefined
  /** Headers a handler adds to its answer, such as RateLimit. */
  responseHeaders: Record<string, string> | undefined
  /** The `:name` segments of the route's pattern, decoded (router.ts). */
  params: Readonly<Record<string, string>>
}

/** A route handler; it throws only for bugs and infrastructure faults. */
export type Handler = (req: IncomingMessage, ctx: RequestContext) => Outcome | Promise<Outcome>

/** Builds a 200-class reply. */
export function reply(body: unknown, status = 200): Reply {
  return { kind: 'reply', status, body }
}
