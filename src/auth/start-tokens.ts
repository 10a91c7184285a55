import type { Sql } from 'postgres'
import type { Log } from '../log.ts'
import { devTokenName, ensureDevToken } from './dev-token.ts'
import { createLastUse } from './last-use.ts'
import { createTokenCache, type TokenCache, type TokenEntry } from './token-cache.ts'
import { watchTokenLifetimes } from './token-warnings.ts'

/** The tokens of a running service. */
export type ServiceTokens = {
  readonly cache: TokenCache
  /** Hears each use of a valid token: its last use is recorded. */
  readonly used: (token: TokenEntry, now: number) => void
  readonly close: () => Promise<void>
}

/** What `startTokens` does besides the cache. */
export type TokenStart = {
  /** What `prepareTokens` does once per start; undefined for a worker (its primary does it). */
  readonly prepare?: { readonly embedded: boolean; readonly dataDir: string } | undefined
  /** How often a token's last use is written at most (tests make it short). */
  readonly lastUseEveryMs?: number | undefined
}

/**
 * What is done once per start, whatever the number of processes (with WORKERS, by the primary):
 * the dev token when `embedded`, in `dataDir`; the warnings about tokens that never expire (the
 * embedded database's dev token left out) or expire soon, then daily. Resolves to a function
 * that stops the daily ones.
 */
export async function prepareTokens(
  sql: Sql,
  log: Log,
  { embedded, dataDir }: { readonly embedded: boolean; readonly dataDir: string },
): Promise<() => void> {
  if (embedded) await ensureDevToken(sql, dataDir, log)
  return watchTokenLifetimes(sql, log, { unwarned: embedded ? devTokenName : undefined })
}

/**
 * The tokens' start: the dev token and the warnings (before the cache, whose first reload would
 * otherwise run beside them on the pool's second connection), then the cache (loaded, LISTENing
 * on `listenSql`), and the recorder of last uses, which writes on `sql`: never on the creates'
 * statement slots.
 */
export async function startTokens(
  sql: Sql,
  listenSql: Sql,
  log: Log,
  { prepare, lastUseEveryMs }: TokenStart = {},
): Promise<ServiceTokens> {
  const stopWarnings = prepare ? await prepareTokens(sql, log, prepare) : () => {}
  const cache = createTokenCache(sql, log, undefined, listenSql)
  try {
    await cache.start()
  } catch (err) {
    stopWarnings()
    await cache.close()
    throw err
  }
  const lastUse = createLastUse(sql, log, lastUseEveryMs)
  return {
    cache,
    used: lastUse.note,
    async close() {
      stopWarnings()
      await cache.close()
      await lastUse.settled()
    },
  }
}
