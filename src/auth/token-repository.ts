import type { Sql } from 'postgres'
import type { Log } from '../log.ts'
import { type Refusal, refusal } from '../outcome.ts'
import { defaultTokenLifetimeMs } from './lifetime.ts'
import { generateToken, tokenDigest, tokenNamePattern } from './tokens.ts'

/** One row of `npm run token -- list`. */
export type TokenInfo = { name: string; createdAt: Date; revokedAt: Date | null }

/**
 * Creates a token that expires at `expiresAt` (`null`: never; by default in 90 days); only its
 * digest is stored, so the returned token is shown this once.
 */
export async function createToken(
  sql: Sql,
  name: string,
  expiresAt: Date | null = new Date(Date.now() + defaultTokenLifetimeMs),
): Promise<string | Refusal> {
  if (!tokenNamePattern.test(name)) {
    return refusal(
      `token name ${JSON.stringify(name)} must be 1 to 64 characters of A-Z a-z 0-9 . _ -`,
    )
  }
  const token = generateToken()
  const rows = await sql`
    insert into api_tokens (name, token_sha256, expires_at)
    values (${name}, ${tokenDigest(token)}, ${expiresAt})
    on conflict (name) do nothing
    returning name`
  if (rows.length === 0)
    return refusal(`a token named ${name} exists already; names are never reused`)
  return token
}

/** Every token, valid or revoked, oldest first. */
export async function listTokens(sql: Sql): Promise<TokenInfo[]> {
  return sql<TokenInfo[]>`
    select name, created_at as "createdAt", revoked_at as "revokedAt"
    from api_tokens order by created_at, name`
}

/** Revokes a token; revoking a revoked token changes nothing. */
export async function revokeToken(sql: Sql, name: string): Promise<Date | Refusal> {
  const [row] = await sql<{ revokedAt: Date }[]>`
    update api_tokens set revoked_at = coalesce(revoked_at, now())
    where name = ${name}
    returning revoked_at as "revokedAt"`
  return row?.revokedAt ?? refusal(`no token is named ${name}`)
}

/** The names of the tokens that are not revoked and never expire, oldest first. */
export async function everlastingTokens(sql: Sql): Promise<string[]> {
  const rows = await sql<{ name: string }[]>`
    select name from api_tokens where revoked_at is null and expires_at is null
    order by created_at, name`
  return rows.map((r) => r.name)
}

/**
 * Warns, once, naming the tokens that never expire (made with `--expires-in never`, or before
 * tokens had a lifetime): a leaked copy of one works until someone revokes it.
 */
export async function warnAboutEverlastingTokens(sql: Sql, log: Log): Promise<void> {
  const names = await everlastingTokens(sql)
  if (names.length === 0) return
  log.warn(
    `${names.length} token(s) never expire: ${names.join(', ')}; a leaked copy works until it is revoked. Replace each with one that expires: npm run token -- create NEW --expires-in 90d, hand it to the client, then npm run token -- revoke NAME`,
    { tokens: names.join(',') },
  )
}

/** Whether any token, valid or revoked, has ever been created. */
export async function hasAnyToken(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`select exists (select from api_tokens) as any`
  return row?.any ?? false
}
