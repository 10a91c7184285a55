import type { Sql } from 'postgres'
import type { Log } from '../log.ts'
import { ensureDevToken } from './dev-token.ts'
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
  /**
   * Once per start (with WORKERS the primary does it, primary.ts): the dev token when
   * `embedded`, in `dataDir`; the warnings about tokens that never expire or expire soon, then
   * daily. Undefined for a worker.
   */
  readonly prepare?: { readonly embedded: boolean; readonly dataDir: string } | undefined
  /** How often a token's last use is written at most (tests make it short). */
  readonly lastUseEveryMs?: number | undefined
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
  let stopWarnings = () => {}
  if (prepare) {
    if (prepare.embedded) await ensureDevToken(sql, prepare.dataDir, log)
    stopWarnings = await watchTokenLifetimes(sql, log)
  }
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
