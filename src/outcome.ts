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
