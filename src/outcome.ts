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
 * A create (or a check) the database could not take now: answered 503 (50301) with
 * `Retry-After`, and counted by `reason` in `plant_store_database_unavailable_total`. `detail`
 * says what happened, for the request's log line (never SQL or a token); `cause` is the error
 * it came from, if any.
 */
export type Unavailable = {
  readonly kind: 'unavailable'
  readonly reason: UnavailableReason
  readonly detail: string
  readonly cause?: unknown
}

/** A create that ended neither stored nor unavailable: a bug or an unexpected error (500). */
export type Fault = { readonly kind: 'fault'; readonly error: unknown }

export function unavailable(
  detail: string,
  reason: UnavailableReason = 'database',
  cause?: unknown,
): Unavailable {
  return cause === undefined
    ? { kind: 'unavailable', reason, detail }
    : { kind: 'unavailable', reason, detail, cause }
}

export function fault(error: unknown): Fault {
  return { kind: 'fault', error }
}

/**
 * The error the database layer throws when PostgreSQL cannot be reached or does not answer in
 * time (a connection cut loose, a probe's deadline). It never leaves the create path as a
 * throw: `outcomeOfError` (db/reach/unavailable.ts, with the rest of the database's
 * vocabulary: what counts as unavailable, deadlines) makes it an `Unavailable` value.
 */
export class DatabaseUnavailable extends Error {
  override name = 'DatabaseUnavailable'
  readonly reason: UnavailableReason
  constructor(message: string, options: { reason?: UnavailableReason; cause?: unknown } = {}) {
    super(message, { cause: options.cause })
    this.reason = options.reason ?? 'database'
  }
}
