import type { IncomingMessage } from 'node:http'
import { type Failure, failure } from '../http/errors.ts'

const token68 = /^[A-Za-z0-9\-._~+/]+=*$/

/**
 * Reads RFC 6750 bearer credentials from the `Authorization` header: the scheme is
 * case-insensitive, one space separates it from a single token68 token.
 */
export function readBearerToken(req: IncomingMessage): string | Failure {
  // Node keeps only the first of repeated Authorization headers; several are several tokens.
  let count = 0
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]?.length === 13 && raw[i]?.toLowerCase() === 'authorization') count++
  }
  const header = req.headers.authorization
  if (header === undefined || header === '') {
    return failure(40101, 'credentials required: send Authorization: Bearer <token>')
  }
  if (count > 1) return failure(40010, 'Authorization: send exactly one header with one token')
  const space = header.indexOf(' ')
  const scheme = space === -1 ? header : header.slice(0, space)
  if (scheme.toLowerCase() !== 'bearer') {
    return failure(40101, 'credentials required: the Authorization scheme must be Bearer')
  }
  const token = space === -1 ? '' : header.slice(space + 1)
  if (token === '') return failure(40010, 'Authorization: Bearer needs a token')
  if (!token68.test(token)) {
    return failure(40010, 'Authorization: the token must be one token68 value after a single space')
  }
  return token
}
