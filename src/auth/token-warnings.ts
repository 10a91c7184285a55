import type { Sql } from 'postgres'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'

import { fromNow } from './lifetime.ts'
import { everlastingTokens, expiringTokens } from './token-repository.ts'

/**
 * Warns, once, naming the tokens that never expire (made with `--expires-in never`, or before
 * tokens had a lifetime): a leaked copy of one works until someone revokes it. `unwarned`: a
 * name left out (the embedded database's dev token, which the README has just handed over).
 */
export async function warnAboutEverlastingTokens(
  sql: Sql,
  log: Log,
  unwarned?: string,
): Promise<void> {
  const names = (await everlastingTokens(sql)).filter((name) => name !== unwarned)
  if (names.length === 0) return
  log.warn(
    'tokens that never expire: a leaked copy works until it is revoked; replace each with one that expires (npm run token -- rotate NAME --expires-in 90d) and hand the new token to the client',
    { tokens: names.join(','), count: names.length },
  )
}

/** One warning line for each token that works and expires within 14 days, naming it. */
export async function warnAboutExpiringTokens(sql: Sql, log: Log, now = Date.now()): Promise<void> {
  for (const { name, expiresAt } of await expiringTokens(sql, limits.tokens.warnBefore)) {
    log.warn('a token expires soon: rotate it before then (npm run token -- rotate NAME)', {
      token: name,
      expiresAt: expiresAt.toISOString(),
      expiresIn: fromNow(expiresAt, now),
    })
  }
}

/**
 * The start-up warnings about tokens, then the expiring ones again once a day while the
 * service runs. Resolves, after the first, to a function that stops the daily ones.
 */
export async function watchTokenLifetimes(
  sql: Sql,
  log: Log,
  {
    everyMs = limits.tokens.warnEvery,
    unwarned,
  }: { everyMs?: number; unwarned?: string | undefined } = {},
): Promise<() => void> {
  await warnAboutEverlastingTokens(sql, log, unwarned)
  await warnAboutExpiringTokens(sql, log)
  const timer = setInterval(() => {
    warnAboutExpiringTokens(sql, log).catch((err: unknown) =>
      log.warn('could not read which tokens expire soon', { error: describeError(err) }),
    )
  }, everyMs)
  timer.unref()
  return () => clearInterval(timer)
}
