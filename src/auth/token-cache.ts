import type { Sql } from 'postgres'
import { withDeadline } from '../db/unavailable.ts'
import { limits } from '../limits.ts'
import type { Log } from '../log.ts'
import { tokenDigest } from './tokens.ts'

/** The channel the `api_tokens` trigger notifies on every change. */
export const tokensChannel = 'api_tokens_changed'

/** A token that is not revoked: its name, and when it expires (`Date.now()` ms; null: never). */
export type TokenEntry = { readonly name: string; readonly expiresAt: number | null }

/** The valid tokens of this process, by digest; kept current without a query per request. */
export type TokenCache = {
  /**
   * The token's entry, or `undefined` when it is unknown or revoked. Whether it has expired is
   * the caller's to judge, against the clock, so that expiry needs no reload.
   */
  readonly verify: (token: string) => TokenEntry | undefined
  /** Loads the tokens, then follows changes (LISTEN/NOTIFY and a periodic reload). */
  readonly start: () => Promise<void>
  /** Reloads now; resolves when a reload that started after this call has finished. */
  readonly reload: () => Promise<void>
  /** The number of valid tokens, and when (`Date.now()`) they were last loaded successfully. */
  readonly state: () => { valid: number; loadedAt: number | undefined }
  readonly close: () => Promise<void>
}

/**
 * Creates the cache; `reloadEveryMs` bounds how stale it gets when a notification is lost.
 * `listenSql` holds the LISTEN when `sql` cannot: a pooler in transaction mode drops it.
 */
export function createTokenCache(
  sql: Sql,
  log: Log,
  reloadEveryMs = 30_000,
  listenSql: Sql = sql,
): TokenCache {
  let byDigest = new Map<string, TokenEntry>()
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
    const rows = await withDeadline(
      sql<{ name: string; digest: string; expiresAt: number | null }[]>`
        select name, encode(token_sha256, 'hex') as digest,
          (extract(epoch from expires_at) * 1000)::float8 as "expiresAt"
        from api_tokens
        where revoked_at is null`,
      limits.database.request,
    )
    byDigest = new Map(rows.map((r) => [r.digest, { name: r.name, expiresAt: r.expiresAt }]))
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
        error: err instanceof Error ? err.message : String(err),
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
    state: () => ({ valid: byDigest.size, loadedAt }),
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
