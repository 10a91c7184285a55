import { Socket } from 'node:net'
import postgres from 'postgres'
import { limits } from '../../limits.ts'
import { describeError } from '../../log.ts'
import { startTls, type TlsSettings, tlsSettingsOf } from './tls.ts'
import { connectionError } from './unavailable.ts'
import { type DatabaseUrl, hostsOf, readDatabaseUrl, withoutTlsParameters } from './url.ts'

/** The driver's view of where to connect (`host` and `port` lists, or a Unix socket `path`). */
export type Target = {
  readonly host: readonly string[]
  readonly port: readonly number[]
  readonly path?: string | false
  /** Seconds. */
  readonly connect_timeout?: number
}

/** A socket-opening function in the shape of the driver's `socket` option. */
export type OpenSocket = (target: Target) => Promise<Socket>

/** An `OpenSocket` that says whether it checks, before the driver, that a server takes writes. */
export type Connector = OpenSocket & { readonly checksWritable: boolean }

/** Watches each socket a connection attempt opens; stops the attempt when its signal aborts. */
export type AttemptHooks = {
  readonly opened?: (socket: Socket) => void
  /** The socket `raw` is now wrapped by `secure` (TLS), which alone is handed over. */
  readonly secured?: (raw: Socket, secure: Socket) => void
  readonly signal?: AbortSignal
}

/**
 * Opens a TCP (or Unix) socket and resolves once it is connected. An error or close while
 * connecting rejects (the driver attaches its listeners only after the promise settles, so an
 * error emitted before that would end the process); so does `timeoutMs` without a connection,
 * which the driver would otherwise not count until it has the socket.
 */
function connectSocket(
  where: { host: string; port: number } | { path: string },
  timeoutMs: number,
  { opened, signal }: AttemptHooks,
): Promise<Socket> {
  const socket = new Socket()
  opened?.(socket)
  const name = 'path' in where ? where.path : `${where.host}:${where.port}`
  return new Promise((resolve, reject) => {
    const fail = (err: Error) => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', aborted)
      socket.off('connect', connected)
      socket.destroy()
      reject(err)
    }
    const aborted = () =>
      fail(
        signal?.reason instanceof Error ? signal.reason : connectionError('aborted', 'ECONNRESET'),
      )
    const timer = setTimeout(
      () => fail(connectionError(`connect CONNECT_TIMEOUT ${name}`, 'CONNECT_TIMEOUT')),
      timeoutMs,
    )
    const closed = () => fail(connectionError(`connect ECONNRESET ${name}`, 'ECONNRESET'))
    const connected = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', aborted)
      socket.off('error', fail)
      socket.off('close', closed)
      // For good: the driver drops its listeners when the connection closes, and an error after
      // that (a write to a socket cut loose) must not end the process.
      socket.on('error', () => {})
      resolve(socket)
    }
    if (signal?.aborted) return aborted()
    signal?.addEventListener('abort', aborted, { once: true })
    socket.once('error', fail)
    socket.once('close', closed)
    socket.once('connect', connected)
    if ('path' in where) socket.connect(where.path)
    else {
      socket.connect(where.port, where.host)
      // The driver names the host and port in its connection errors from these.
      Object.assign(socket, { host: where.host, port: where.port })
    }
  })
}

/**
 * Whether the server at `url` (one host) takes writes: not in recovery, not read-only. A
 * connection of its own, ended at once; within `timeoutMs`, else an error.
 */
async function isWritable(
  url: URL,
  open: () => Promise<Socket>,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<boolean> {
  const sql = postgres(withoutTlsParameters(url.toString()), {
    max: 1,
    connect_timeout: timeoutMs / 1000,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: 'plant-store probe' },
    // The driver's types omit the option.
    ...({ socket: open } as object),
  })
  let timer: ReturnType<typeof setTimeout> | undefined
  const abort = () => sql.end({ timeout: 0 }).catch(() => {})
  signal?.addEventListener('abort', abort, { once: true })
  try {
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            connectionError(`no answer from ${url.host} within ${timeoutMs} ms`, 'CONNECT_TIMEOUT'),
          ),
        timeoutMs,
      )
    })
    const [row] = await Promise.race([
      sql<{ writable: boolean }[]>`
        select not pg_is_in_recovery() and current_setting('transaction_read_only') = 'off'
          as writable`,
      late,
    ])
    return row?.writable === true
  } finally {
    clearTimeout(timer)
    signal?.removeEventListener('abort', abort)
    await sql.end({ timeout: 0 }).catch(() => {})
  }
}

/** Where a one-host URL points, for a socket. */
const whereOf = (host: URL) => ({
  host: host.hostname.replace(/^\[|\]$/g, ''),
  port: Number(host.port || 5432),
})

/** A socket to one host, secured as `settings` ask. */
async function openHost(
  where: { host: string; port: number },
  settings: TlsSettings,
  timeoutMs: number,
  hooks: AttemptHooks,
): Promise<Socket> {
  const raw = await connectSocket(where, timeoutMs, hooks)
  return settings.mode === 'disable' ? raw : startTls(raw, where.host, settings, timeoutMs, hooks)
}

/**
 * Whether the server of a one-host URL takes writes (not in recovery, not read-only), asked on a
 * connection of its own secured as the URL says, within `timeoutMs`. `hostConnector` asks it of
 * each host before the real connection; `primaryUrl` to find the host the migrations write to.
 */
export function isWritableHost(
  host: URL,
  timeoutMs: number,
  settings: TlsSettings = tlsSettingsOf(host.toString()),
  signal?: AbortSignal,
): Promise<boolean> {
  return isWritable(host, () => openHost(whereOf(host), settings, timeoutMs, {}), timeoutMs, signal)
}

/**
 * The multi-host walk, as libpq makes it: the hosts in order, passing over one that fails or,
 * when `writable`, does not take writes (asked on a connection of its own, `isWritableHost`);
 * resolves with what `use` makes of the first that passes. When every host is passed over it
 * rejects naming each host and why (one host: its own error).
 */
async function walkHosts<T>(
  hosts: readonly URL[],
  {
    writable,
    timeoutMs,
    settings,
    signal,
  }: {
    writable: boolean
    timeoutMs: number
    settings: TlsSettings
    signal?: AbortSignal | undefined
  },
  use: (host: URL) => Promise<T>,
): Promise<T> {
  const problems: string[] = []
  let last: unknown
  for (const host of hosts) {
    if (signal?.aborted) break
    try {
      if (writable && !(await isWritableHost(host, timeoutMs, settings, signal))) {
        problems.push(`${host.host} does not take writes`)
        last = connectionError(`${host.host} does not take writes`, 'ECONNREFUSED')
        continue
      }
      return await use(host)
    } catch (err) {
      last = err
      problems.push(`${host.host}: ${describeError(err)}`)
    }
  }
  if (hosts.length === 1 && last instanceof Error) throw last
  const lastCode = (last as { code?: unknown } | undefined)?.code
  const code = typeof lastCode === 'string' ? lastCode : 'ECONNREFUSED'
  throw connectionError(
    `no ${writable ? 'writable' : 'usable'} server among the hosts (${problems.join('; ')})`,
    code,
  )
}

/**
 * The URL of the one writable server of a URL with several hosts (the first that is neither in
 * recovery nor read-only, by the same walk), for tools that take one host, such as
 * node-pg-migrate. A URL with one host is returned as it is.
 */
export async function writableUrl(text: string): Promise<string> {
  const url = readDatabaseUrl(text)
  if (url.hosts.length < 2) return text
  return walkHosts(
    url.hosts,
    { writable: true, timeoutMs: limits.database.connect, settings: tlsSettingsOf(url) },
    async (host) => host.toString(),
  )
}

/**
 * Opens the socket of one connection attempt to a database URL, as libpq does: the URL's hosts
 * in order, within the one attempt, passing over a host that refuses or does not answer within
 * the connect time-out and, where `target_session_attrs` is `read-write` (or `primary`) and
 * there are several hosts, one that does not take writes (asked on a connection of its own,
 * before the driver's). A refusal of every host rejects, naming each host and why.
 *
 * The driver is given the URL's first host only (`singleHostUrl`), so that a failed attempt
 * fails its statement and hands the connection back to the pool; which host is used is decided
 * here, afresh for each attempt. `current`, where given, is asked for the URL at each attempt
 * instead (a Citus group's primary as pg_dist_node names it now, which may have been demoted
 * since): its host is used only while it takes writes.
 */
export function hostConnector(
  url: string | DatabaseUrl,
  current?: () => string,
): Connector & { hooks: (h: AttemptHooks) => Connector } {
  const read = typeof url === 'string' ? readDatabaseUrl(url) : url
  const fixed = read.hosts
  // The one check of writability per connection: here, before the driver's (driverUrl).
  const probe = current !== undefined || (fixed.length > 1 && read.wantsWritable)
  const settings = tlsSettingsOf(read)
  const attempt = (hooks: AttemptHooks): Connector =>
    Object.assign(
      async (target: Target) => {
        const timeoutMs = (target.connect_timeout ?? 30) * 1000
        if (target.path) return connectSocket({ path: target.path }, timeoutMs, hooks)
        const hosts = current === undefined ? fixed : hostsOf(current())
        if (hosts.length === 0)
          return openHost(
            { host: target.host[0] ?? 'localhost', port: target.port[0] ?? 5432 },
            settings,
            timeoutMs,
            hooks,
          )
        return walkHosts(
          hosts,
          { writable: probe, timeoutMs, settings, signal: hooks.signal },
          (host) => openHost(whereOf(host), settings, timeoutMs, hooks),
        )
      },
      { checksWritable: probe },
    )
  return Object.assign(attempt({}), { hooks: attempt })
}
