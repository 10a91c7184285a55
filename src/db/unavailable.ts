import { limits } from '../limits.ts'
import { describeError } from '../log.ts'
import { DatabaseUnavailable } from '../outcome.ts'

// Connection-level failures of the postgres driver and of Node's sockets.
const connectionCodes = new Set([
  'CONNECT_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_DESTROYED',
  'CONNECTION_ENDED',
  'ECONNREFUSED',
  // Out of file handles (the process's or the system's): a connection could not be opened now.
  'EMFILE',
  'ENFILE',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
])

// SQLSTATEs that mean "not now" rather than "never": connection exceptions (08), statement
// timeout or cancel (57014), server shutting down or starting (57P01-57P03), too many
// connections (53300), out of resources (53*), serialization and deadlock (40001, 40P01), and a
// read-only server (25006): a standby, or a primary demoted by a failover.
function isTransientSqlState(code: string): boolean {
  return (
    code === '25006' ||
    code.startsWith('08') ||
    code.startsWith('53') ||
    code.startsWith('57P') ||
    code === '57014' ||
    code === '40001' ||
    code === '40P01'
  )
}

/**
 * Citus reports a worker lost in the middle of a distributed transaction without a SQLSTATE of
 * its own (XX000, internal error): "failure on connection marked as essential: host:port". The
 * transaction was rolled back or its outcome is unknown, as with any lost connection; a retry is
 * safe (the id is the idempotency key).
 */
function isCitusWorkerLost(code: string, message: unknown): boolean {
  return (
    code === 'XX000' &&
    typeof message === 'string' &&
    message.startsWith('failure on connection marked as essential')
  )
}

/** Whether an error thrown by the driver means the database is unavailable for now. */
export function isUnavailable(err: unknown): boolean {
  if (err instanceof DatabaseUnavailable) return true
  if (typeof err !== 'object' || err === null) return false
  const { code, message } = err as { code?: unknown; message?: unknown }
  if (typeof code !== 'string') return false
  return connectionCodes.has(code) || isTransientSqlState(code) || isCitusWorkerLost(code, message)
}

/**
 * Whether an error means the connection it came through is gone or unusable (lost, refused, reset,
 * ended by the server), as against a statement that failed on a healthy connection (a statement
 * timeout, a read-only server, a serialization failure).
 */
export function isConnectionLost(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code !== 'string') return false
  return connectionCodes.has(code) || code.startsWith('08') || code.startsWith('57P0')
}

/** Rethrows driver errors that mean "unavailable" as `DatabaseUnavailable`, others unchanged. */
export function translateUnavailable(err: unknown): never {
  if (err instanceof DatabaseUnavailable) throw err
  if (isUnavailable(err)) {
    const code = (err as { code: string }).code
    throw new DatabaseUnavailable(`database error ${code}`, { cause: err })
  }
  throw err
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
