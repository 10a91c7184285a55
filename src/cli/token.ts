import process from 'node:process'
import type { Sql } from 'postgres'
import { expiryOf, fromNow, graceEndOf, parseDuration, tokenState } from '../auth/lifetime.ts'
import {
  createToken,
  listTokens,
  revokeToken,
  rotateToken,
  type TokenInfo,
} from '../auth/token-repository.ts'
import type { Config } from '../config.ts'
import type { Log } from '../log.ts'
import { isFailure } from '../outcome.ts'
import { onMigratedSession } from './database.ts'

/** The usage line of `npm run token`. */
export const tokenUsage =
  'usage: npm run token -- create NAME [--expires-in DURATION|never] | rotate NAME [--grace DURATION] [--expires-in DURATION|never] | list [--expiring DURATION] | revoke NAME'

/** Where a command writes: its result, one line at a time, and what is meant for a person. */
export type CommandOutput = { out: (line: string) => void; err: (line: string) => void }

const standardStreams: CommandOutput = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
}

/**
 * `npm run token -- create | rotate | list | revoke` on the writable server, writing to standard
 * output and error (or to `output`: the tests run the command in their own process).
 */
export async function tokenCommand(
  config: Config,
  log: Log,
  args: readonly string[],
  output: CommandOutput = standardStreams,
): Promise<number> {
  if (parseArgs(args) === undefined) return fail(output.err, tokenUsage)
  return onMigratedSession(config, log, 'plant-store token', (sql) =>
    runTokenCommand(args, sql, output.out, output.err),
  )
}

type Verb = 'create' | 'rotate' | 'list' | 'revoke'
type Parsed = { verb: Verb; name: string | undefined; flags: Map<string, string> }

// Each verb: whether it takes a NAME, and the options it takes (each with a value).
const verbs: Record<Verb, { name: boolean; flags: readonly string[] }> = {
  create: { name: true, flags: ['--expires-in'] },
  rotate: { name: true, flags: ['--grace', '--expires-in'] },
  list: { name: false, flags: ['--expiring'] },
  revoke: { name: true, flags: [] },
}

/** The verb, NAME and options of the arguments; undefined when they do not fit the usage. */
function parseArgs(args: readonly string[]): Parsed | undefined {
  const [verb, ...rest] = args
  if (verb === undefined || !Object.hasOwn(verbs, verb)) return undefined
  const shape = verbs[verb as Verb]
  let name: string | undefined
  if (shape.name) {
    name = rest.shift()
    if (name === undefined || name.startsWith('--')) return undefined
  }
  const flags = new Map<string, string>()
  while (rest.length > 0) {
    const [flag, value] = rest.splice(0, 2)
    if (flag === undefined || value === undefined || !shape.flags.includes(flag)) return undefined
    if (flags.has(flag)) return undefined
    flags.set(flag, value)
  }
  return { verb: verb as Verb, name, flags }
}

/**
 * Runs `token create | rotate | list | revoke`. `create` and `rotate` write the token alone on
 * one line of `out`, `list` its table; everything meant for a person goes to `err`. Resolves to
 * the exit status.
 */
export async function runTokenCommand(
  args: readonly string[],
  sql: Sql,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  const parsed = parseArgs(args)
  if (parsed === undefined) return fail(err, tokenUsage)
  const { verb, name = '', flags } = parsed
  switch (verb) {
    case 'create': {
      const expiresAt = expiryOf(flags.get('--expires-in'))
      if (isFailure(expiresAt)) return fail(err, expiresAt.message)
      const token = await createToken(sql, name, expiresAt)
      if (isFailure(token)) return fail(err, token.message)
      out(token)
      err(
        `created token ${name}, ${expiryText(expiresAt)}; it is shown only now, so keep it somewhere safe`,
      )
      return 0
    }
    case 'rotate': {
      const expiresAt = expiryOf(flags.get('--expires-in'))
      if (isFailure(expiresAt)) return fail(err, expiresAt.message)
      const graceEndsAt = graceEndOf(flags.get('--grace'))
      if (isFailure(graceEndsAt)) return fail(err, graceEndsAt.message)
      const rotated = await rotateToken(sql, name, expiresAt, graceEndsAt)
      if (isFailure(rotated)) return fail(err, rotated.message)
      out(rotated.token)
      const oldEnds = rotated.oldEndsAt
      err(
        `rotated token ${name}: the new one is ${expiryText(expiresAt)}; ${
          oldEnds.getTime() <= Date.now()
            ? 'the old one is refused from now on'
            : `the old one keeps working until ${oldEnds.toISOString()} (${fromNow(oldEnds)}), then is refused`
        }. The new token is shown only now: hand it to the client before the old one ends`,
      )
      return 0
    }
    case 'list': {
      const within = flags.get('--expiring')
      const ms = within === undefined ? undefined : parseDuration(within)
      if (isFailure(ms)) return fail(err, ms.message)
      const now = Date.now()
      const rows = (await listTokens(sql)).filter(
        (t) => ms === undefined || expiresWithin(t, now, ms),
      )
      out(['NAME', 'CREATED', 'EXPIRES', 'LAST USED', 'STATE'].join('\t'))
      for (const t of rows) {
        out(
          [
            t.name,
            t.createdAt.toISOString(),
            t.expiresAt?.toISOString() ?? 'never',
            t.lastUsedAt?.toISOString() ?? 'never',
            tokenState(t, now),
          ].join('\t'),
        )
      }
      return 0
    }
    case 'revoke': {
      const revokedAt = await revokeToken(sql, name)
      if (isFailure(revokedAt)) return fail(err, revokedAt.message)
      err(`every token named ${name} is revoked (since ${revokedAt.toISOString()})`)
      return 0
    }
  }
}

function expiryText(expiresAt: Date | null): string {
  return expiresAt === null
    ? 'which never expires: a leaked copy works until it is revoked; prefer --expires-in (at most 365d)'
    : `expiring ${expiresAt.toISOString()} (${fromNow(expiresAt)})`
}

// Tokens that work now and whose expiry falls within `ms`: the ones someone must rotate.
function expiresWithin(t: TokenInfo, now: number, ms: number): boolean {
  if (t.revokedAt !== null || t.expiresAt === null) return false
  const left = t.expiresAt.getTime() - now
  return left > 0 && left <= ms
}

function fail(err: (line: string) => void, message: string): number {
  err(message)
  return 1
}
