/**
 * The one shape of an expected failure: a function that can refuse returns `T | Refusal` (or an
 * HTTP `Failure`, a refusal with an error code), and its caller checks it with `isFailure`.
 * Throwing is for faults nobody expects.
 */
export type Refusal = { readonly kind: 'failure'; readonly message: string }

/** A refusal for a person: why, in one sentence. */
export function refusal(message: string): Refusal {
  return { kind: 'failure', message }
}

/** Whether an outcome is a refusal rather than a value. */
export function isFailure<T>(outcome: T): outcome is Extract<T, Refusal> {
  return (
    typeof outcome === 'object' &&
    outcome !== null &&
    (outcome as { kind?: unknown }).kind === 'failure'
  )
}

/**
 * Why a request found the database unavailable: too many creates waiting, no answer before the
 * request's deadline, or the database itself (connection lost or refused, statement timeout).
 */
export type UnavailableReason = 'queue_full' | 'deadline' | 'database'

/**
 * The one exception an answer expects: PostgreSQL cannot be reached or does not answer in time.
 * The store throws it; the HTTP adapter answers it 503 (50301). The rest of the database
 * vocabulary (what counts as unavailable, deadlines) is db/reach/unavailable.ts.
 */
export class DatabaseUnavailable extends Error {
  override name = 'DatabaseUnavailable'
  readonly reason: UnavailableReason
  constructor(message: string, options: { reason?: UnavailableReason; cause?: unknown } = {}) {
    super(message, { cause: options.cause })
    this.reason = options.reason ?? 'database'
  }
}
