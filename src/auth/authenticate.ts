import type { IncomingMessage } from 'node:http'
import { type Failure, failure } from '../http/errors.ts'
import { isFailure } from '../outcome.ts'
import { readBearerToken } from './bearer.ts'
import type { TokenCache } from './token-cache.ts'
import { failsChecksum } from './tokens.ts'

/** The name of the token a request carries, or why it is refused (40010, 40101, 40102). */
export function authenticate(req: IncomingMessage, tokens: TokenCache): string | Failure {
  const token = readBearerToken(req)
  if (isFailure(token)) return token
  // A mistyped or made-up token of the checksummed shape is refused before any look-up.
  if (failsChecksum(token)) return failure(40102, 'the token is unknown or revoked')
  return tokens.verify(token) ?? failure(40102, 'the token is unknown or revoked')
}
