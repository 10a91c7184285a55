import { createHash, randomBytes } from 'node:crypto'

/** The prefix of every token this service issues, so that a leaked one is easy to recognise. */
export const tokenPrefix = 'pst_'

/** Token names: what logs and `plants.created_by` show. */
export const tokenNamePattern = /^[A-Za-z0-9._-]{1,64}$/

/** A new token: the prefix and 256 random bits in base64url. */
export function generateToken(): string {
  return tokenPrefix + randomBytes(32).toString('base64url')
}

/** The SHA-256 digest of a token: all that the database keeps of it. */
export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token).digest()
}
