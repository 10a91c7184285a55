import type { IncomingMessage } from 'node:http'
import { type Failure, failure } from '../http/errors.ts'
import { limits } from '../limits.ts'
import { isFailure } from '../outcome.ts'
import { readBearerToken } from './bearer.ts'
import type { TokenCache, TokenEntry } from './token-cache.ts'
import { failsChecksum } from './tokens.ts'

/**
 * The token a request carries, or why it is refused (40010, 40101, 40102, 40103). Expiry and
 * the end of a rotation's grace are judged against the clock at each request: every instance
 * refuses the token from the moment either passes, with no reload or notification.
 */
export function authenticate(
  req: IncomingMessage,
  tokens: TokenCache,
  now = Date.now(),
): TokenEntry | Failure {
  const token = readBearerToken(req)
  if (isFailure(token)) return token
  // A mistyped or made-up token of the checksummed shape is refused before any look-up.
  if (failsChecksum(token)) return failure(40102, 'the token is unknown or revoked')
  const entry = tokens.verify(token)
  if (entry === undefined || (entry.endsAt !== null && now >= entry.endsAt))
    return failure(40102, 'the token is unknown or revoked')
  if (entry.expiresAt !== null && now >= entry.expiresAt) return failure(40103, 'the token expired')
  return entry
}

/** The header that tells a client its token expires soon: `Token-Expires`, an HTTP date. */
export const tokenExpiresHeader = 'token-expires'

/**
 * `Token-Expires: <HTTP date>` on every answer to a token that expires within 14 days, so that
 * a client can warn before it breaks; nothing for any other token.
 */
export function expiryNotice(token: TokenEntry, now: number): Record<string, string> | undefined {
  if (token.expiresAt === null || token.expiresAt - now > limits.tokens.warnBefore) return undefined
  return { [tokenExpiresHeader]: new Date(token.expiresAt).toUTCString() }
}
