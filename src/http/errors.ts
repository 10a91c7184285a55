import { limits } from '../limits.ts'
import type { Fault, Refusal, Unavailable, UnavailableReason } from '../outcome.ts'

/**
 * The error table of the contract: every code the service answers with, its HTTP status and the
 * sentence that documents it. Responses and the documentation are both built from this table.
 */
export const errorTable = {
  40001: { status: 400, when: 'The body is missing or empty' },
  40002: { status: 400, when: 'Unsupported Content-Type or Content-Encoding' },
  40003: { status: 400, when: `The body is larger than ${limits.bodyBytes / 1024} KiB` },
  40004: { status: 400, when: 'The body is not well-formed UTF-8 JSON' },
  40005: { status: 400, when: 'The body is JSON but not a valid NewPlant' },
  40009: { status: 400, when: 'A plant with this id exists with a different name or tag' },
  40010: { status: 400, when: 'The Authorization header is malformed for the Bearer scheme' },
  40101: {
    status: 401,
    when: 'No credentials: no Authorization header, or a scheme other than Bearer',
  },
  40102: { status: 401, when: 'Unknown or revoked token' },
  40103: { status: 401, when: 'The token expired' },
  40401: { status: 404, when: 'No such path' },
  40501: { status: 405, when: 'The path exists, the method does not' },
  42901: { status: 429, when: 'Too many failed authentications from this client address' },
  42902: { status: 429, when: 'This token sent more requests than its rate limit allows' },
  50001: { status: 500, when: 'Unexpected fault (logged with the request id)' },
  50301: { status: 503, when: 'The database is unreachable or timed out' },
} as const

/** One code of the error table. */
export type ErrorCode = keyof typeof errorTable

/**
 * An expected failure of a request: a refusal with a code of the table, `Allow` for 405, and the
 * seconds to wait for 429.
 */
export type Failure = Refusal & {
  readonly code: ErrorCode
  readonly allow?: readonly string[]
  readonly retryAfter?: number
}

/** A 429: the client may try again after `seconds`. */
export function tooMany(code: 42901 | 42902, message: string, seconds: number): Failure {
  return { kind: 'failure', code, message, retryAfter: Math.max(1, seconds) }
}

/** Builds a failure outcome. */
export function failure(code: ErrorCode, message: string, allow?: readonly string[]): Failure {
  return allow === undefined
    ? { kind: 'failure', code, message }
    : { kind: 'failure', code, message, allow }
}

/** The status and headers a failure is answered with (the body is always `{error, message}`). */
export function failureHeaders(f: Failure): Record<string, string> {
  switch (f.code) {
    case 40010:
      return { 'www-authenticate': 'Bearer realm="plants", error="invalid_request"' }
    case 40101:
      return { 'www-authenticate': 'Bearer realm="plants"' }
    case 40102:
      return { 'www-authenticate': 'Bearer realm="plants", error="invalid_token"' }
    case 40103:
      return {
        'www-authenticate':
          'Bearer realm="plants", error="invalid_token", error_description="the token expired"',
      }
    case 40501:
      return { allow: (f.allow ?? []).join(', ') }
    case 42901:
    case 42902:
      return { 'retry-after': String(f.retryAfter ?? 1) }
    case 50301:
      return { 'retry-after': String(limits.retryAfterSeconds) }
    default:
      return {}
  }
}

/** A 503 for the database, with what the server counts it by and logs of it. */
export type UnavailableAnswer = Failure & {
  readonly unavailable: { readonly reason: UnavailableReason; readonly detail: string }
}

/**
 * The one answer to a database outcome that is not a value, for `POST /plants` and `/readyz`
 * alike: unavailable is 503 (50301, `Retry-After`), saying `message`, with its reason and detail
 * beside, by which the server counts every database 503 once
 * (`plant_store_database_unavailable_total`) and logs it; a fault is thrown, to be answered 500
 * (50001) and logged with its stack by the server, as every fault is.
 */
export function answerOf(
  outcome: Unavailable | Fault,
  message = 'the database is unavailable; try again shortly',
): UnavailableAnswer {
  if (outcome.kind === 'fault') throw outcome.error
  return {
    kind: 'failure',
    code: 50301,
    message,
    unavailable: { reason: outcome.reason, detail: outcome.detail },
  }
}
