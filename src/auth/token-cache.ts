import type { Sql } from 'postgres'
import { withDeadline } from '../db/reach/unavailable.ts'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'
import { tokenDigest } from './tokens.ts'

/** The channel the `api_tokens` trigger notifies on every change. */
export const tokensChannel = 'api_tokens_changed'

/**
 * A token that works or worked (times in `Date.now()` ms): its name, when it expires (null:
 * never), when a rotation's grace ends it (null: not rotated) and when it was last used as
 * loaded (null: not recorded).
 */
export type TokenEntry = {
  readonly id: string
  readonly name: string
  readonly expiresAt: number | null
  readonly endsAt: number | null
  readonly lastUsedAt: number | null
}

/** The valid tokens of this process, by digest; kept current without a query per request. */
export type TokenCache = {
  /**
   * The token's entry, or `undefined` when it is unknown or revoked. Whether it has expired, or
   * its grace has ended, is the caller's to judge against the clock: neither needs a reload.
   */
  readonly verify: (token: string) => TokenEntry | undefined
  /** Loads the tokens, then follows changes (LISTEN/NOTIFY and a periodic reload). */
  readonly start: () => Promise<void>
  /** Reloads now; resolves when a reload that started after this call has finished. */
  readonly reload: () => Promise<void>
  /**
   * The number of valid tokens, when (`Date.now()`) they were last loaded successfully, and when
   * each name's current token expires (names whose token never expires are left out).
   */
  readonly state: () => {
    valid: number
    loadedAt: number | undefined
    expiries: ReadonlyMap<string, number>
  }
  readonly close: () => Promise<void>
}

/**
 * Creates the cache; `reloadEveryMs` bounds how stale it gets when a notification is lost.
 * `listenSql` holds the LISTEN when `sql` cannot: a pooler in transaction mode drops it.
 */
export function createTokenCache(
  sql: Sql,
  log: Log,
  reloadEveryMs: number = limits.tokens.reloadEvery,
  listenSql: Sql = sql,
): TokenCache {
  let byDigest = new Map<string, TokenEntry>()
  let expiries = new Map<string, number>()
  // Tokens already verified since the last load, by their text: a map look-up instead of a
  // SHA-256 per request. Only valid tokens enter it, so it holds at most one entry per valid
  // token; every load starts it afresh, so a revocation clears it.
  let verified = new Map<string, TokenEntry>()
  let running: Promise<void> | undefined
  let queued: Promise<void> | undefined
  let timer: ReturnType<typeof setInterval> | undefined
  let unlisten: (() => Promise<void>) | undefined
  let loadedAt: number | undefined

  async function load(): Promise<void> {
    // With a deadline: a load stuck on a partitioned connection would hold back every later one.
    // A rotated token in its grace has its end in revoked_at, still to come.
    const rows = await withDeadline(
      sql<(TokenEntry & { digest: string })[]>`
        select id::text, name, encode(token_sha256, 'hex') as digest,
          (extract(epoch from expires_at) * 1000)::float8 as "expiresAt",
          (extract(epoch from revoked_at) * 1000)::float8 as "endsAt",
          (extract(epoch from last_used_at) * 1000)::float8 as "lastUsedAt"
        from api_tokens
        where revoked_at is null or revoked_at > now()`,
      limits.database.request,
    )
    byDigest = new Map(rows.map(({ digest, ...entry }) => [digest, Object.freeze(entry)] as const))
    // A rotated token in its grace is not its name's current one.
    expiries = new Map(
      rows.flatMap((r) =>
        r.endsAt === null && r.expiresAt !== null ? [[r.name, r.expiresAt]] : [],
      ),
    )
    verified = new Map()
    loadedAt = Date.now()
    log.debug('tokens loaded', { count: byDigest.size })
  }

  // At most one load runs; calls during it share one more load after it.
  function reload(): Promise<void> {
    if (running === undefined) {
      running = load().finally(() => {
        running = undefined
      })
      return running
    }
    queued ??= running
      .catch(() => {})
      .then(() => {
        queued = undefined
        return reload()
      })
    return queued
  }

  function reloadLogged(reason: string) {
    reload().catch((err: unknown) => {
      log.warn('token reload failed; keeping the tokens loaded before', {
        reason,
        error: describeError(err),
      })
    })
  }

  return Object.freeze({
    verify(token: string) {
      const known = verified.get(token)
      if (known !== undefined) return known
      const entry = byDigest.get(tokenDigest(token).toString('hex'))
      if (entry !== undefined) verified.set(token, entry)
      return entry
    },
    reload,
    state: () => ({ valid: byDigest.size, loadedAt, expiries }),
    async start() {
      await reload()
      const listening = await listenSql.listen(
        tokensChannel,
        () => reloadLogged('notification'),
        // Called again after every reconnect: changes missed while disconnected are picked up.
        () => reloadLogged('listen'),
      )
      unlisten = listening.unlisten
      timer = setInterval(() => reloadLogged('periodic'), reloadEveryMs)
      timer.unref()
    },
    async close() {
      clearInterval(timer)
      await unlisten?.().catch(() => {})
    },
  })
}
