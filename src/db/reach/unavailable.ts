import { limits } from '../../limits.ts'
import { describeError } from '../../log.ts'
import {
  DatabaseUnavailable,
  type Fault,
  fault,
  type Unavailable,
  unavailable,
} from '../../outcome.ts'

/**
 * Why a statement failed for want of a database, when sending it again may succeed once the
 * database is back: the connection refused, lost or ended by the server (a restart, a
 * switchover, a terminated backend, a pooler restarting), the server starting or stopping, a
 * read-only server, no connection slot free, a serialization failure, a Citus worker lost.
 * `undefined` for anything else, a statement timeout (57014) among them: that statement had its
 * database and its time. The labels are those of `plant_store_creates_resent_total`.
 */
export const resendReasons = [
  'refused',
  'connection_lost',
  'terminated',
  'not_accepting',
  'read_only',
  'too_many_connections',
  'serialization',
  'connect_timeout',
  'no_answer',
  'unreachable',
  'out_of_file_handles',
  'citus_worker_lost',
] as const
export type ResendReason = (typeof resendReasons)[number]

/** The SQLSTATEs the service acts on by name (the rest it reads by class, above). */
export const sqlState = {
  readOnly: '25006',
  undefinedTable: '42P01',
  diskFull: '53100',
  statementTimeout: '57014',
} as const

// Connection-level failures of the postgres driver and of Node's sockets, and why each is worth
// sending again.
const connectionReasons: Readonly<Record<string, ResendReason>> = {
  ECONNREFUSED: 'refused',
  ECONNRESET: 'connection_lost',
  EPIPE: 'connection_lost',
  CONNECTION_CLOSED: 'connection_lost',
  CONNECTION_DESTROYED: 'connection_lost',
  CONNECTION_ENDED: 'connection_lost',
  CONNECT_TIMEOUT: 'connect_timeout',
  // A socket's own time-out, or a silent connection cut loose (slots.ts).
  ETIMEDOUT: 'no_answer',
  EHOSTUNREACH: 'unreachable',
  ENETUNREACH: 'unreachable',
  ENOTFOUND: 'unreachable',
  EAI_AGAIN: 'unreachable',
  // Out of file handles (the process's or the system's): a connection could not be opened now.
  EMFILE: 'out_of_file_handles',
  ENFILE: 'out_of_file_handles',
}
const connectionCodes = new Set(Object.keys(connectionReasons))

// The SQLSTATEs worth sending again (08*, a connection exception, too: see `resendReason`).
const sqlStateReasons: Readonly<Record<string, ResendReason>> = {
  // admin_shutdown: pg_terminate_backend, or a fast shutdown ending the session.
  '57P01': 'terminated',
  '57P02': 'terminated',
  // cannot_connect_now: starting up, shutting down, in recovery.
  '57P03': 'not_accepting',
  [sqlState.readOnly]: 'read_only',
  '53300': 'too_many_connections',
  '40001': 'serialization',
  '40P01': 'serialization',
}

/**
 * Errors Citus raises without a SQLSTATE of its own (XX000, internal error) when a node goes away
 * under a statement: a worker lost in the middle of a distributed transaction ("failure on
 * connection marked as essential: host:port", "failed to prepare transaction … on host",
 * "execution cannot recover from multiple connection failures"), or the server's own postmaster
 * gone while it waited on a worker ("postmaster was shut down, exiting": a coordinator or worker
 * killed or stopping under the statement). The transaction was rolled back or its outcome is
 * unknown, as with any lost connection; a retry is safe (the id is the idempotency key). Each
 * with its resend reason.
 */
const citusNodeLost: readonly (readonly [prefix: string, reason: ResendReason])[] = [
  ['failure on connection marked as essential', 'citus_worker_lost'],
  ['failed to prepare transaction', 'citus_worker_lost'],
  ['execution cannot recover from multiple connection failures', 'citus_worker_lost'],
  ['postmaster was shut down', 'terminated'],
]

function citusNodeLostReason(code: string, message: unknown): ResendReason | undefined {
  if (code !== 'XX000' || typeof message !== 'string') return undefined
  return citusNodeLost.find(([prefix]) => message.startsWith(prefix))?.[1]
}

// SQLSTATEs that mean "not now" rather than "never": connection exceptions (08), statement
// timeout or cancel (57014), server shutting down or starting (57P01-57P03), too many
// connections (53300), out of resources (53*), serialization and deadlock (40001, 40P01), and a
// read-only server (25006): a standby, or a primary demoted by a failover.
function isTransientSqlState(code: string): boolean {
  return (
    code === sqlState.readOnly ||
    code.startsWith('08') ||
    code.startsWith('53') ||
    code.startsWith('57P') ||
    code === sqlState.statementTimeout ||
    code === '40001' ||
    code === '40P01'
  )
}

/**
 * PostgreSQL's own message when an error (`code`, `message`) says its disk is full: disk_full
 * (53100: a relation file that cannot grow, a WAL segment that cannot be made, a temporary file;
 * PostgreSQL maps ENOSPC to it wherever it reports a file's error with its code), the messages
 * it raises without a code of its own while it cannot write (XX000: the relation-cache init file
 * a new connection writes, `elog(FATAL, "could not write init file")` in relcache.c), and any
 * message that quotes the operating system's "No space left on device" (ENOSPC) or "Disk quota
 * exceeded" (EDQUOT). The messages are matched in English, PostgreSQL's default `lc_messages`;
 * under another language only 53100 is recognised.
 */
function diskFullOf(code: unknown, message: unknown): string | undefined {
  if (typeof message !== 'string')
    return code === sqlState.diskFull ? 'disk full (53100)' : undefined
  if (
    code === sqlState.diskFull ||
    (code === 'XX000' && message.startsWith('could not write init file')) ||
    message.includes('No space left on device') ||
    message.includes('Disk quota exceeded')
  )
    return message
  return undefined
}

/** What an error from the database (or from reaching it) means to the service. */
export type ErrorReading = {
  /** Its SQLSTATE, or the driver's or the socket's code. */
  readonly code: string | undefined
  /** Why a statement that failed with it is worth sending again (see `ResendReason`), if it is. */
  readonly resend: ResendReason | undefined
  /**
   * The database is unavailable for now (503), rather than a fault: a connection lost or
   * refused, a transient SQLSTATE, a Citus node lost, a full disk, a `DatabaseUnavailable`.
   */
  readonly unavailable: boolean
  /**
   * The connection it came through is gone or unusable (lost, refused, reset, ended by the
   * server), as against a statement that failed on a healthy connection (a statement timeout, a
   * read-only server, a serialization failure).
   */
  readonly connectionLost: boolean
  /** A write met a read-only server (25006): a standby, or a demoted primary. */
  readonly readOnly: boolean
  /** PostgreSQL's message when its disk is full (see `diskFullOf`). */
  readonly diskFull: string | undefined
  /** A relation is missing (42P01): the schema is not current. */
  readonly undefinedTable: boolean
}

/**
 * The one reading of an error from the database: every question the service asks of one is
 * answered here, from its code and message, looking through a `DatabaseUnavailable` to its
 * cause.
 */
export function readError(err: unknown): ErrorReading {
  const cause = err instanceof DatabaseUnavailable && err.cause !== undefined ? err.cause : err
  const { code: anyCode, message } =
    typeof cause === 'object' && cause !== null
      ? (cause as { code?: unknown; message?: unknown })
      : {}
  const code = typeof anyCode === 'string' ? anyCode : undefined
  const diskFull =
    typeof cause === 'object' && cause !== null ? diskFullOf(anyCode, message) : undefined
  if (code === undefined)
    return {
      code,
      resend: undefined,
      unavailable: err instanceof DatabaseUnavailable,
      connectionLost: false,
      readOnly: false,
      diskFull,
      undefinedTable: false,
    }
  const citusLost = citusNodeLostReason(code, message)
  return {
    code,
    resend:
      connectionReasons[code] ??
      sqlStateReasons[code] ??
      (code.startsWith('08') ? 'connection_lost' : citusLost),
    unavailable:
      err instanceof DatabaseUnavailable ||
      connectionCodes.has(code) ||
      isTransientSqlState(code) ||
      citusLost !== undefined ||
      diskFull !== undefined,
    connectionLost: connectionCodes.has(code) || code.startsWith('08') || code.startsWith('57P0'),
    readOnly: code === sqlState.readOnly,
    diskFull,
    undefinedTable: code === sqlState.undefinedTable,
  }
}

/**
 * How a create ends by the error its statement (or our own code around it) ended with:
 * unavailable (`readError`: its reason, and what happened in words without SQL, for the log
 * line), or a fault.
 */
export function outcomeOfError(err: unknown): Unavailable | Fault {
  if (err instanceof DatabaseUnavailable) return unavailable(err.message, err.reason, err.cause)
  const { unavailable: isUnavailable, code, diskFull } = readError(err)
  if (!isUnavailable) return fault(err)
  const what = diskFull === undefined ? 'database error' : "the database's disk is full:"
  return unavailable(`${what} ${code}`, 'database', err)
}

/** Rethrows driver errors that mean "unavailable" as `DatabaseUnavailable`, others unchanged. */
export function translateUnavailable(err: unknown): never {
  const outcome = outcomeOfError(err)
  if (outcome.kind === 'fault') throw err
  if (err instanceof DatabaseUnavailable) throw err
  throw new DatabaseUnavailable(outcome.detail, { reason: outcome.reason, cause: err })
}

/**
 * Resolves like `work`, or rejects with `DatabaseUnavailable` after `ms`: the driver may stall
 * for seconds while it reconnects, and a request must not wait on it.
 */
export function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new DatabaseUnavailable(`no answer within ${ms} ms`, { reason: 'deadline' })),
      ms,
    )
  })
  return Promise.race([work.catch(translateUnavailable), deadline]).finally(() =>
    clearTimeout(timer),
  )
}

/**
 * A failure to open a start's first connection, as a person reads it: a time-out says the
 * connect limit it ran into (a black-holed database); anything else keeps its own words.
 */
export function connectFailure(err: unknown): Error {
  const message = describeError(err)
  return new Error(
    /timeout/i.test(message)
      ? `no answer within ${limits.database.connect / 1000} s (${message})`
      : message,
    { cause: err },
  )
}

/** A failure of a connection attempt with the code the driver's own would carry (503). */
export const connectionError = (message: string, code: string): Error =>
  Object.assign(new Error(message), { code })
