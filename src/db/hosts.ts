import { Socket } from 'node:net'
import postgres from 'postgres'
import { hostUrls } from './database-url.ts'

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

/** Watches each socket a connection attempt opens; stops the attempt when its signal aborts. */
export type AttemptHooks = {
  readonly opened?: (socket: Socket) => void
  readonly signal?: AbortSignal
}

/** A failure of one connection attempt, coded so the service answers 503. */
const failure = (message: string, code: string) => Object.assign(new Error(message), { code })

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
      fail(signal?.reason instanceof Error ? signal.reason : failure('aborted', 'ECONNRESET'))
    const timer = setTimeout(
      () => fail(failure(`connect CONNECT_TIMEOUT ${name}`, 'CONNECT_TIMEOUT')),
      timeoutMs,
    )
    const closed = () => fail(failure(`connect ECONNRESET ${name}`, 'ECONNRESET'))
    const connected = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', aborted)
      socket.off('error', fail)
      socket.off('close', closed)
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
async function isWritable(url: URL, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
  const sql = postgres(url.toString(), {
    max: 1,
    connect_timeout: timeoutMs / 1000,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: 'plant-store probe' },
  })
  let timer: ReturnType<typeof setTimeout> | undefined
  const abort = () => sql.end({ timeout: 0 }).catch(() => {})
  signal?.addEventListener('abort', abort, { once: true })
  try {
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(failure(`no answer from ${url.host} within ${timeoutMs} ms`, 'CONNECT_TIMEOUT')),
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

/** The hosts of a URL, each as a one-host URL without `target_session_attrs`. */
function hostsOf(url: string): URL[] {
  const urls = hostUrls(url) ?? []
  for (const u of urls) u.searchParams.delete('target_session_attrs')
  return urls
}

/** Whether `target_session_attrs` asks for a server that takes writes. */
const wantsWritable = (url: string) =>
  /[?&]target_session_attrs=(read-write|primary)(&|$)/.test(url)

/**
 * Opens the socket of one connection attempt to a database URL, as libpq does: the URL's hosts
 * in order, within the one attempt, passing over a host that refuses or does not answer within
 * the connect time-out and, where `target_session_attrs` is `read-write` (or `primary`) and
 * there are several hosts, one that does not take writes (asked on a connection of its own,
 * before the driver's). A refusal of every host rejects, naming each host and why.
 *
 * The driver is given the URL's first host only (`singleHostUrl`), so that a failed attempt
 * fails its statement and hands the connection back to the pool; which host is used is decided
 * here, afresh for each attempt.
 */
export function hostConnector(
  url: string,
): OpenSocket & { hooks: (h: AttemptHooks) => OpenSocket } {
  const hosts = hostsOf(url)
  const probe = hosts.length > 1 && wantsWritable(url)
  const attempt =
    (hooks: AttemptHooks): OpenSocket =>
    async (target) => {
      const timeoutMs = (target.connect_timeout ?? 30) * 1000
      if (target.path || hosts.length === 0) {
        const host = target.host[0] ?? 'localhost'
        const port = target.port[0] ?? 5432
        return connectSocket(target.path ? { path: target.path } : { host, port }, timeoutMs, hooks)
      }
      const problems: string[] = []
      let last: unknown
      for (const host of hosts) {
        if (hooks.signal?.aborted) break
        const where = {
          host: host.hostname.replace(/^\[|\]$/g, ''),
          port: Number(host.port || 5432),
        }
        try {
          if (probe && !(await isWritable(host, timeoutMs, hooks.signal))) {
            problems.push(`${host.host} does not take writes`)
            last = failure(`${host.host} does not take writes`, 'ECONNREFUSED')
            continue
          }
          return await connectSocket(where, timeoutMs, hooks)
        } catch (err) {
          last = err
          problems.push(`${host.host}: ${err instanceof Error ? err.message : String(err)}`)
        }
      }
      if (hosts.length === 1 && last instanceof Error) throw last
      const lastCode = (last as { code?: unknown } | undefined)?.code
      const code = typeof lastCode === 'string' ? lastCode : 'ECONNREFUSED'
      throw failure(`no usable server among the hosts (${problems.join('; ')})`, code)
    }
  return Object.assign(attempt({}), { hooks: attempt })
}

/** The URL with its first host only, for the driver, which `hostConnector` opens sockets for. */
export function singleHostUrl(url: string): string {
  const m = /^(postgres(?:ql)?:\/\/(?:[^@/?#]*@)?)([^/?#]*)(.*)$/s.exec(url)
  if (!m) return url
  const [, head = '', hosts = '', rest = ''] = m
  return `${head}${hosts.split(',')[0]}${rest}`
}
