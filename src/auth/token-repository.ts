import type { Sql } from 'postgres'
import { limits } from '../limits.ts'
import { type Refusal, refusal } from '../outcome.ts'
import { generateToken, tokenDigest, tokenNamePattern } from './tokens.ts'

/** One token, as `npm run token -- list` shows it. */
export type TokenInfo = {
  readonly name: string
  readonly createdAt: Date
  /** When it expires; null: never. */
  readonly expiresAt: Date | null
  /** When it stops working by revocation or at the end of a rotation's grace; null: not so. */
  readonly revokedAt: Date | null
  /** When `rotate` replaced it by a successor; null for the current token of its name. */
  readonly replacedAt: Date | null
  readonly lastUsedAt: Date | null
}

function badName(name: string): Refusal | undefined {
  if (tokenNamePattern.test(name)) return undefined
  return refusal(
    `token name ${JSON.stringify(name)} must be 1 to 64 characters of A-Z a-z 0-9 . _ -`,
  )
}

/**
 * Creates a token that expires at `expiresAt` (`null`: never; by default in 90 days); only its
 * digest is stored, so the returned token is shown this once.
 */
export async function createToken(
  sql: Sql,
  name: string,
  expiresAt: Date | null = new Date(Date.now() + limits.tokens.lifetime),
): Promise<string | Refusal> {
  const invalid = badName(name)
  if (invalid) return invalid
  const token = generateToken()
  // The name is unique among the tokens not replaced, revoked ones included: never used again.
  const rows = await sql`
    insert into api_tokens (name, token_sha256, expires_at)
    values (${name}, ${tokenDigest(token)}, ${expiresAt})
    on conflict (name) where replaced_at is null do nothing
    returning id`
  if (rows.length === 0)
    return refusal(`a token named ${name} exists already; names are never reused`)
  return token
}

/**
 * Replaces the current token of `name` by a new one that expires at `expiresAt`; the old one
 * keeps working until `graceEndsAt` (or its own expiry, if sooner), then is refused as revoked.
 * One statement, so the name always has one current token. (Not `sql.begin`: with one statement
 * per connection, `max_pipeline: 0`, the driver loses the transaction's connection.)
 */
export async function rotateToken(
  sql: Sql,
  name: string,
  expiresAt: Date | null,
  graceEndsAt: Date,
): Promise<{ token: string; oldEndsAt: Date } | Refusal> {
  const invalid = badName(name)
  if (invalid) return invalid
  const token = generateToken()
  // The insert reads the update's row, so it runs after it: the name's one current token is
  // the new one by the time the unique index is checked.
  const [row] = await sql<{ found: boolean; endsAt: Date | null }[]>`
    with old as (
      select id, revoked_at from api_tokens
      where name = ${name} and replaced_at is null
      for update),
    ended as (
      update api_tokens t
      set replaced_at = now(), revoked_at = greatest(now(), ${graceEndsAt}::timestamptz)
      from old where t.id = old.id and old.revoked_at is null
      returning t.id, t.revoked_at),
    added as (
      insert into api_tokens (name, token_sha256, expires_at, replaces)
      select ${name}, ${tokenDigest(token)}, ${expiresAt}::timestamptz, ended.id from ended
      returning id)
    select exists (select from old) as found,
      (select revoked_at from ended where exists (select from added)) as "endsAt"`
  if (!row?.found) return refusal(`no token is named ${name}`)
  if (row.endsAt === null)
    return refusal(
      `token ${name} is revoked; a revoked name is never used again: create a token of another name`,
    )
  return { token, oldEndsAt: row.endsAt }
}

/** Every token, whatever its state, oldest first: the successor after the token it replaced. */
export async function listTokens(sql: Sql): Promise<TokenInfo[]> {
  return sql<TokenInfo[]>`
    select name, created_at as "createdAt", expires_at as "expiresAt",
      revoked_at as "revokedAt", replaced_at as "replacedAt", last_used_at as "lastUsedAt"
    from api_tokens order by created_at, id`
}

/**
 * Revokes every token of a name, a rotated one in its grace included; a token that stopped
 * working already keeps the time it stopped. Resolves to when the name's tokens stopped.
 */
export async function revokeToken(sql: Sql, name: string): Promise<Date | Refusal> {
  const [row] = await sql<{ revokedAt: Date | null }[]>`
    with ended as (
      update api_tokens set revoked_at = now()
      where name = ${name} and (revoked_at is null or revoked_at > now())
      returning revoked_at)
    select coalesce((select max(revoked_at) from ended),
      (select max(revoked_at) from api_tokens where name = ${name})) as "revokedAt"`
  return row?.revokedAt ?? refusal(`no token is named ${name}`)
}

/** The names of the tokens that work and never expire, oldest first. */
export async function everlastingTokens(sql: Sql): Promise<string[]> {
  const rows = await sql<{ name: string }[]>`
    select name from api_tokens where revoked_at is null and expires_at is null
    order by created_at, name`
  return rows.map((r) => r.name)
}

/** The tokens that still work and expire within `withinMs`, soonest first. */
export async function expiringTokens(
  sql: Sql,
  withinMs: number,
): Promise<{ name: string; expiresAt: Date }[]> {
  return sql<{ name: string; expiresAt: Date }[]>`
    select name, expires_at as "expiresAt" from api_tokens
    where replaced_at is null and revoked_at is null
      and expires_at > now() and expires_at <= now() + ${withinMs} * interval '1 millisecond'
    order by expires_at, name`
}

/** Whether any token, valid or revoked, has ever been created. */
export async function hasAnyToken(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`select exists (select from api_tokens) as any`
  return row?.any ?? false
}
