import { readError } from '../db/reach/unavailable.ts'
import { migrationNames, migrationsTable } from '../db/start/migrate.ts'
import { answerOf, failure } from '../http/errors.ts'
import { type Handler, reply } from '../http/types.ts'
import { limits } from '../limits.ts'
import type { Log } from '../log.ts'
import { DatabaseUnavailable, type UnavailableReason, unavailable } from '../outcome.ts'
import type { PlantStore } from '../plants/store.ts'

/** `GET /healthz`: the process runs; the database is not consulted. */
export const healthz: Handler = () => reply({ status: 'ok' })

/**
 * Ready, or not and why; `unavailable` for a 503 that is the database's (counted as every
 * database 503 is), not for an instance that is leaving.
 */
type Verdict =
  | { ready: true }
  | { ready: false; reason: string; unavailable?: UnavailableReason | undefined }

// PostgreSQL's message names files: it is in the log line of the episode, not in an answer.
const diskFullReason =
  "the database's disk is full: creates are answered 503 until a page can be written again"

/**
 * Why the probe failed, in words an operator can act on. `oldestMs`: how long the oldest create
 * statement in flight has waited; past the deadline, the creates themselves are stuck.
 */
function unreadyReason(err: unknown, deadlineMs: number, inFlight: number, oldestMs: number) {
  const read = readError(err)
  if (read.diskFull !== undefined) return diskFullReason
  if (err instanceof DatabaseUnavailable) {
    if (read.readOnly) return 'the database is read-only (a standby, or a demoted primary)'
    if (err.reason !== 'deadline') return `the database is unavailable (${err.message})`
    if (oldestMs >= deadlineMs)
      return `creates are stuck: ${inFlight} statement(s) in flight, the oldest for ${Math.round(oldestMs)} ms`
    return `no answer from the database within ${deadlineMs} ms`
  }
  if (read.undefinedTable) return 'the database schema is not current; migrations are pending'
  // The SQLSTATE only: no SQL or server message in an answer.
  return `the readiness check failed (database error ${read.code ?? 'unknown'})`
}

/**
 * `GET /readyz`, judged by the create path itself: a probe runs through the creates' own slots
 * and connections, ahead of the creates waiting, within `deadlineMs`. Ready when it gets an
 * answer from a writable server whose schema is current; otherwise 503 (50301) with the reason.
 * Each change between ready and not ready is logged once, with the reason.
 */
export function createReadyz(
  store: PlantStore,
  log: Log,
  deadlineMs: number,
  // On a Citus worker the migrations table is the coordinator's: the probe asks only that
  // plants is there, so that a stopped coordinator leaves the worker's instances ready.
  migrationsHere = true,
  /** Why the instance is leaving (SIGTERM), once it is: then never ready, without a probe. */
  leaving: () => string | undefined = () => undefined,
): Handler {
  const expected = migrationNames()
  let ready: boolean | undefined

  async function check(receivedAt: number): Promise<Verdict> {
    try {
      // A full disk is not seen by the probe below (its commit needs no new page): the creates
      // say it, and while none has been stored since, a page written and rolled back.
      const disk = store.diskFull()
      if (
        disk !== undefined &&
        (performance.now() - disk.lastFailure < limits.database.diskFullHold ||
          (await store.checkDisk(receivedAt + deadlineMs)) !== undefined)
      )
        return { ready: false, reason: diskFullReason, unavailable: 'database' }
      // txid_current() gives the probe a transaction id, so its commit is a real one: it fails
      // on a read-only server (25006) and waits for a synchronous standby, as a create does.
      const [row] = await store.probe(
        (sql) =>
          migrationsHere
            ? sql<{ current: boolean }[]>`
                select
                  (select count(*)::int from ${sql(migrationsTable)} where name = any(${expected}))
                    = ${expected.length} as current,
                  txid_current() as xid`
            : sql<{ current: boolean }[]>`
                select to_regclass('plants') is not null as current, txid_current() as xid`,
        receivedAt + deadlineMs,
      )
      if (row?.current !== true)
        return {
          ready: false,
          reason: 'the database schema is not current; migrations are pending',
          unavailable: 'database',
        }
      return { ready: true }
    } catch (err) {
      const { inFlight, oldestMs } = store.load()
      return {
        ready: false,
        reason: unreadyReason(err, deadlineMs, inFlight, oldestMs),
        unavailable: err instanceof DatabaseUnavailable ? err.reason : 'database',
      }
    }
  }

  return async (_req, ctx) => {
    const gone = leaving()
    const verdict: Verdict =
      gone === undefined ? await check(ctx.receivedAt) : { ready: false, reason: gone }
    if (verdict.ready !== ready) {
      ready = verdict.ready
      if (verdict.ready) log.info('readiness: ready')
      else log.warn('readiness: not ready', { reason: verdict.reason })
    }
    if (verdict.ready) return reply({ status: 'ready' })
    // Leaving is the instance's, not the database's: a 503 that is not counted as one.
    if (verdict.unavailable === undefined) return failure(50301, verdict.reason)
    return answerOf(unavailable(verdict.reason, verdict.unavailable), verdict.reason)
  }
}
