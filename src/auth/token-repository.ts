import type { Sql } from 'postgres'
import { type Refusal, refusal } from '../outcome.ts'
import { generateToken, tokenDigest, tokenNamePattern } from './tokens.ts'

/** One row of `npm run token -- list`. */
export type TokenInfo = { name: string; createdAt: Date; revokedAt: Date | null }

/** Creates a token; only its digest is stored, so the returned token is shown this once. */
export async function createToken(sql: Sql, name: string): Promise<string | Refusal> {
  if (!tokenNamePattern.test(name)) {
    return refusal(
      `token name ${JSON.stringify(name)} must be 1 to 64 characters of A-Z a-z 0-9 . _ -`,
    )
  }
  const token = generateToken()
  const rows = await sql`
    insert into api_tokens (name, token_sha256) values (${name}, ${tokenDigest(token)})
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

/** Whether any token, valid or revoked, has ever been created. */
export async function hasAnyToken(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`select exists (select from api_tokens) as any`
  return row?.any ?? false
}
