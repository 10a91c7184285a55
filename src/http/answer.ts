import type { IncomingMessage } from 'node:http'
import { errorTable, type Failure, failureHeaders } from './errors.ts'
import type { Content, Reply } from './types.ts'

// How an outcome becomes the bytes of an answer: JSON with the headers every answer carries, or
// content with its caching and ETag.

/** An answer ready to write: its status, headers and body. */
export type Answer = {
  readonly status: number
  readonly headers: Record<string, string | number>
  readonly body: string | Buffer
}

/** The answer of a reply or an expected failure: JSON, never cached. */
export function jsonAnswer(outcome: Reply | Failure): Answer {
  const status = outcome.kind === 'reply' ? outcome.status : errorTable[outcome.code].status
  const body = JSON.stringify(
    outcome.kind === 'reply' ? outcome.body : { error: outcome.code, message: outcome.message },
  )
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
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
export function contentAnswer(req: IncomingMessage, content: Content): Answer {
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
