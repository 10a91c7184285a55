import type { Sql } from 'postgres'
import { createToken, listTokens, revokeToken } from '../auth/token-repository.ts'

/** The usage line of `npm run token`. */
export const tokenUsage = 'usage: npm run token -- create NAME | list | revoke NAME'

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
  if (verb === 'create' && name !== undefined && extra.length === 0) {
    const result = await createToken(sql, name)
    if ('problem' in result) return fail(err, result.problem)
    out(result.token)
    err(`created token ${name}; it is shown only now, so keep it somewhere safe`)
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
    const result = await revokeToken(sql, name)
    if ('problem' in result) return fail(err, result.problem)
    err(`token ${name} is revoked (since ${result.revokedAt.toISOString()})`)
    return 0
  }
  return fail(err, tokenUsage)
}

function fail(err: (line: string) => void, message: string): number {
  err(message)
  return 1
}
