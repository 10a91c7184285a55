import postgres, { type Sql } from 'postgres'
import { limits } from '../../limits.ts'
import type { Log } from '../../log.ts'
import { type Connector, hostConnector } from './hosts.ts'
import { driverUrl, readDatabaseUrl } from './url.ts'

// The array types the service sends, by OID. With `fetch_types` off (see below) the driver knows
// no array type, so these two are declared here.
const textArray = 1009
const int8Array = 1016

/** A PostgreSQL array literal of text values (`NULL` for null), as the driver would write it. */
function arrayLiteral(values: readonly (string | null)[] | string): string {
  if (typeof values === 'string') return values
  const elements = values.map((v) =>
    v === null ? 'NULL' : `"${v.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`,
  )
  return `{${elements.join(',')}}`
}

const arrayType = (oid: number) => ({
  to: oid,
  from: [] as number[],
  serialize: arrayLiteral,
  parse: (raw: string) => raw,
})

/** The application_name of the service's sessions; `leaveReadOnlyServer` (slots.ts) ends them by it. */
export const applicationName = 'plant-store'

// One statement per connection at a time. postgres.js otherwise pipelines a query onto a busy
// connection, and one sent there between the socket's error and its close is never settled (its
// close handler rejects what is in flight only on a close without error): a create, or a slot,
// would wait for ever. Waiting in the pool's queue instead, it goes to the next connection that
// opens. No statement of the service gains from pipelining. (The driver's types omit the option.)
//
// And each statement written at once: the driver otherwise holds what it writes until the event
// loop's next turn (`setImmediate`), to send the queries pipelined in one turn together. With one
// statement per connection there is nothing to gather, and the wait is a whole turn of the loop
// (the I/O of every other request) on every create's path: 0.1 ms (p50) at a quarter of the
// peak, more above it (BENCHMARKS.md, "Written at once"). `write_at_once` is the service's
// patch of the driver (patches/README.md).
const onePerConnection: object = { max_pipeline: 0, write_at_once: true }

/** Options of the connection pool. */
export type SqlOptions = {
  readonly max?: number
  readonly applicationName?: string
  /**
   * Through a pooler in transaction mode (PgBouncer): each statement may run on another server
   * connection, so no prepared statements, and no settings sent at start-up, which PgBouncer
   * refuses; set statement_timeout on the role or database instead.
   */
  readonly transactionPooler?: boolean
  /** Hears of every connection closed (lost, or idle), e.g. for the metrics. */
  readonly connectionClosed?: () => void
  /**
   * Opens the sockets itself (the driver's `socket` option), e.g. to destroy them; a
   * `hostConnector` of the same URL. By default, a `hostConnector` of its own.
   */
  readonly socket?: Connector
}

/** Opens a connection pool with the service's settings (statement timeout, quiet notices). */
export function createSql(url: string, log: Log, options: SqlOptions = {}): Sql {
  // The hosts of a multi-host URL are tried by the socket option, in order, in each connection
  // attempt (hosts.ts); the driver sees the first only.
  const read = readDatabaseUrl(url)
  const socket = options.socket ?? hostConnector(read)
  // TLS too (sslmode and its kin): the driver is given a plain socket, secured already.
  return postgres(driverUrl(read, socket.checksWritable), {
    max: options.max ?? 10,
    ...onePerConnection,
    connect_timeout: limits.database.connect / 1000,
    idle_timeout: limits.database.idle / 1000,
    // The driver's default waits up to 20 s between reconnects (3^n / 100 s); requests queue
    // behind that wait. Capped at 0.5 s, an outage is answered at once and left within a second.
    backoff: (retries: number) => (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, 0.5),
    // Plans are prepared per connection; a pooler in transaction mode needs `prepare: false`.
    prepare: !options.transactionPooler,
    // With `fetch_types` on, the driver sends an array-type query on every new connection, and
    // a failure of that query (a connection lost during it) is an unhandled rejection that ends
    // the process (porsager/postgres#1192, #1223). The service sends only text[] and int8[].
    fetch_types: false,
    types: { textArray: arrayType(textArray), int8Array: arrayType(int8Array) },
    // Plans: PostgreSQL's own cache (no plan_cache_mode): a batch's insert is planned once per
    // connection, not at every statement (about 30 us of the server's CPU a statement), and the
    // read of stored ids plans as an index scan even on an empty table
    // (test/plant-batching.test.ts).
    connection: {
      application_name: options.applicationName ?? applicationName,
      ...(options.transactionPooler ? {} : { statement_timeout: limits.database.statement }),
    },
    onnotice: (notice) => log.debug('database notice', { notice: notice.message }),
    onclose: () => options.connectionClosed?.(),
    // The driver's types omit the option.
    ...({ socket } as object),
  })
}

/** The service's pools beside the creates' statement slots. */
export type ServicePools = {
  /** Token loads, last uses and start-up queries: two connections. */
  readonly sql: Sql
  /** Where the token cache LISTENs: `sql`, or through a transaction pooler a session of its own. */
  readonly listen: Sql
  readonly end: () => Promise<void>
}

/**
 * Opens the service's own pools on `url` (through a transaction pooler, LISTEN goes to
 * `sessionUrl`, since it needs a session; where `current` is given, to the URL it names at each
 * connection, e.g. a Citus coordinator's primary as pg_dist_node names it now). The creates
 * have slots of their own (`slots.ts`).
 */
export function openServicePools(
  url: string,
  sessionUrl: string,
  log: Log,
  {
    current,
    ...options
  }: Pick<SqlOptions, 'transactionPooler' | 'connectionClosed'> & {
    /** The URL each connection of `sql` goes to at the time (`hostConnector`), where it moves. */
    current?: () => string
  },
): ServicePools {
  const sql = createSql(url, log, {
    ...options,
    max: 2,
    ...(current && { socket: hostConnector(url, current) }),
  })
  const listen = options.transactionPooler
    ? createSql(sessionUrl, log, { max: 1, applicationName: 'plant-store listen' })
    : sql
  return {
    sql,
    listen,
    async end() {
      if (listen !== sql) await listen.end({ timeout: 5 })
      await sql.end({ timeout: 5 })
    },
  }
}
