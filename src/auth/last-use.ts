import type { Sql } from 'postgres'
import { withDeadline } from '../db/reach/unavailable.ts'
import { limits } from '../limits.ts'
import { describeError, type Log } from '../log.ts'
import type { TokenEntry } from './token-cache.ts'

/** Records when tokens are used, in `api_tokens.last_used_at`. */
export type LastUse = {
  /**
   * Notes that `entry` authenticated a request at `now`: a map look-up, and at most once per
   * token per 10 minutes a write, queued behind the request. It never throws or waits.
   */
  readonly note: (entry: TokenEntry, now: number) => void
  /** Resolves once the writes queued so far have ended (tests, and before closing the pool). */
  readonly settled: () => Promise<void>
}

/**
 * Writes when tokens were last used, at most once per token per `everyMs` across all instances:
 * the update itself skips a row written less than `everyMs` before the use it records, which
 * every instance's write checks under the row's lock. A failed write is logged (at most once a
 * minute) and tried again at the token's next use; it never reaches the request.
 */
export function createLastUse(
  sql: Sql,
  log: Log,
  everyMs: number = limits.tokens.lastUseEvery,
): LastUse {
  // When each token's use was last written (or found written), as this process knows it.
  const written = new Map<string, number>()
  let pending = new Map<string, number>()
  let flushing: Promise<void> = Promise.resolve()
  let scheduled = false
  let failedAt = Number.NEGATIVE_INFINITY

  async function write(batch: Map<string, number>): Promise<void> {
    // Each as a text array, as the driver sends a JS array (sql.ts), made by `push`: this
    // statement, the first after the warm-up (a token's first use), otherwise sent a number
    // parameter and threw away the driver's compiled code for every statement.
    const ids: string[] = []
    const ats: string[] = []
    // A row written at `before` or later holds a use less than `everyMs` old: left as it is.
    const before: string[] = []
    for (const [id, at] of batch) {
      ids.push(id)
      ats.push(new Date(at).toISOString())
      before.push(new Date(at - everyMs).toISOString())
    }
    try {
      // The rows not updated answer with the time another write left there.
      const rows = await withDeadline(
        sql<{ id: string; at: number }[]>`
          with used as (
            select * from unnest(${ids}::text[]::bigint[], ${ats}::text[]::timestamptz[],
              ${before}::text[]::timestamptz[]) as u (id, at, before)),
          updated as (
            update api_tokens t set last_used_at = used.at from used
            where t.id = used.id and (t.last_used_at is null or t.last_used_at <= used.before)
            returning t.id, t.last_used_at)
          select t.id::text, (extract(epoch from coalesce(updated.last_used_at, t.last_used_at))
            * 1000)::float8 as at
          from api_tokens t join used on used.id = t.id
            left join updated on updated.id = t.id`,
        limits.database.request,
      )
      for (const r of rows) written.set(r.id, Math.max(r.at, written.get(r.id) ?? 0))
    } catch (err) {
      // Forget what was not written, so that the tokens' next uses try again.
      for (const id of ids) written.delete(id)
      const now = Date.now()
      if (now - failedAt >= limits.tokens.lastUseFailureLogEvery)
        log.warn('could not record when tokens were last used', {
          tokens: ids.length,
          error: describeError(err),
        })
      failedAt = now
    }
  }

  function flush(): void {
    scheduled = false
    const batch = pending
    pending = new Map()
    flushing = flushing.then(() => write(batch))
  }

  return Object.freeze({
    note(entry: TokenEntry, now: number) {
      const last = written.get(entry.id) ?? entry.lastUsedAt ?? Number.NEGATIVE_INFINITY
      // After a failed write, a pause before the next: a database that is down is not asked
      // again at every request.
      if (now - last < everyMs || now - failedAt < limits.tokens.lastUsePauseAfterFailure) return
      written.set(entry.id, now)
      pending.set(entry.id, now)
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    },
    async settled() {
      while (scheduled || pending.size > 0) await new Promise((done) => setImmediate(done))
      await flushing
    },
  })
}
