import type { IncomingMessage } from 'node:http'
import { type Failure, failure } from '../http/errors.ts'
import { isFailure } from '../outcome.ts'
import { readBearerToken } from './bearer.ts'
import type { TokenCache } from './token-cache.ts'
import { failsChecksum } from './tokens.ts'

/**
 * The name of the token a request carries, or why it is refused (40010, 40101, 40102, 40103).
 * Expiry is judged against the clock at each request: every instance refuses an expired token
 * from the moment it passes, with no reload or notification.
 */
export function authenticate(
  req: IncomingMessage,
  tokens: TokenCache,
  now = Date.now(),
): string | Failure {
  const token = readBearerToken(req)
  if (isFailure(token)) return token
  // A mistyped or made-up token of the checksummed shape is refused before any look-up.
  if (failsChecksum(token)) return failure(40102, 'the token is unknown or revoked')
  const entry = tokens.verify(token)
  if (entry === undefined) return failure(40102, 'the token is unknown or revoked')
  if (entry.expiresAt !== null && now >= entry.expiresAt) return failure(40103, 'the token expired')
  return entry.name
}
