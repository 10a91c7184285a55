import process from 'node:process'
import type { Sql } from 'postgres'
import { expiryOf, fromNow } from '../auth/lifetime.ts'
import { createToken, listTokens, revokeToken } from '../auth/token-repository.ts'
import type { Config } from '../config.ts'
import type { Log } from '../log.ts'
import { isFailure } from '../outcome.ts'
import { onMigratedSession } from './database.ts'

/** The usage line of `npm run token`. */
export const tokenUsage =
  'usage: npm run token -- create NAME [--expires-in DURATION | --expires-in never] | list | revoke NAME'

/** `npm run token -- create NAME | list | revoke NAME` on the writable server. */
export async function tokenCommand(
  config: Config,
  log: Log,
  args: readonly string[],
): Promise<number> {
  if (args.length === 0) {
    process.stderr.write(`${tokenUsage}\n`)
    return 1
  }
  return onMigratedSession(config, log, 'plant-store token', (sql) =>
    runTokenCommand(
      args,
      sql,
      (line) => process.stdout.write(`${line}\n`),
      (line) => process.stderr.write(`${line}\n`),
    ),
  )
}

/**
 * Runs `token create NAME | list | revoke NAME`. `create` writes the token alone on one line of
 * `out`; everything meant for a person goes to `err`. Resolves to the exit status.
 */
export async function runTokenCommand(
  args: readonly string[],
  sql: Sql,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  const [verb, name, ...extra] = args
  if (
    verb === 'create' &&
    name !== undefined &&
    (extra.length === 0 || (extra.length === 2 && extra[0] === '--expires-in'))
  ) {
    const expiresAt = expiryOf(extra[1])
    if (isFailure(expiresAt)) return fail(err, expiresAt.message)
    const token = await createToken(sql, name, expiresAt)
    if (isFailure(token)) return fail(err, token.message)
    out(token)
    err(
      expiresAt === null
        ? `created token ${name}, which never expires: a leaked copy works until it is revoked; prefer --expires-in (at most 365d). It is shown only now, so keep it somewhere safe`
        : `created token ${name}, expiring ${expiresAt.toISOString()} (${fromNow(expiresAt)}); it is shown only now, so keep it somewhere safe`,
    )
    return 0
  }
  if (verb === 'list' && name === undefined) {
    const rows = await listTokens(sql)
    out(['NAME', 'CREATED', 'REVOKED'].join('\t'))
    for (const r of rows) {
      out([r.name, r.createdAt.toISOString(), r.revokedAt?.toISOString() ?? '-'].join('\t'))
    }
    return 0
  }
  if (verb === 'revoke' && name !== undefined && extra.length === 0) {
    const revokedAt = await revokeToken(sql, name)
    if (isFailure(revokedAt)) return fail(err, revokedAt.message)
    err(`token ${name} is revoked (since ${revokedAt.toISOString()})`)
    return 0
  }
  return fail(err, tokenUsage)
}

function fail(err: (line: string) => void, message: string): number {
  err(message)
  return 1
}
