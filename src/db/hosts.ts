import { readFileSync } from 'node:fs'
import { isIP, Socket } from 'node:net'
import tls from 'node:tls'
import postgres from 'postgres'
import { describeError } from '../log.ts'
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
  /** The socket `raw` is now wrapped by `secure` (TLS), which alone is handed over. */
  readonly secured?: (raw: Socket, secure: Socket) => void
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

/** libpq's `sslmode`: `allow` is taken as `prefer` (TLS when the server offers it). */
type TlsMode = 'disable' | 'allow' | 'prefer' | 'require' | 'verify-ca' | 'verify-full'
const tlsModes: readonly TlsMode[] = [
  'disable',
  'allow',
  'prefer',
  'require',
  'verify-ca',
  'verify-full',
]

/** How a connection is secured: libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey`. */
export type TlsSettings = {
  readonly mode: TlsMode
  readonly ca?: Buffer
  readonly cert?: Buffer
  readonly key?: Buffer
}

// The URL's parameters that the connector acts on and the driver must not see: it would send
// the ones it does not know to the server as settings, which refuses them.
const tlsParameters = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'sslnegotiation', 'ssl']

/**
 * The TLS settings of a database URL, as libpq reads them: `sslmode` (`disable` when absent, the
 * driver's default), `sslrootcert` (a CA file, or `system` for Node's CAs, which
 * NODE_EXTRA_CA_CERTS extends; `sslmode=verify-full` then), `sslcert` and `sslkey` (a client
 * certificate). Throws, naming the parameter, for a mode it does not know or a file it cannot read.
 */
export function tlsSettingsOf(url: string): TlsSettings {
  const query = url.includes('?') ? new URLSearchParams(url.slice(url.indexOf('?') + 1)) : undefined
  const read = (name: string): Buffer | undefined => {
    const file = query?.get(name)
    if (!file || (name === 'sslrootcert' && file === 'system')) return undefined
    try {
      return readFileSync(file)
    } catch (err) {
      throw new Error(`${name} ${file} cannot be read: ${(err as Error).message}`)
    }
  }
  const given =
    query?.get('sslmode') ?? (query?.get('sslrootcert') === 'system' ? 'verify-full' : 'disable')
  if (!tlsModes.includes(given as TlsMode))
    throw new Error(`sslmode ${given} is not one of ${tlsModes.join(', ')}`)
  const ca = read('sslrootcert')
  const cert = read('sslcert')
  const key = read('sslkey')
  return {
    mode: given as TlsMode,
    ...(ca && { ca }),
    ...(cert && { cert }),
    ...(key && { key }),
  }
}

/** The URL without the TLS parameters, which the connector acts on (`tlsSettingsOf`). */
export function withoutTlsParameters(url: string): string {
  const q = url.indexOf('?')
  if (q === -1) return url
  const query = new URLSearchParams(url.slice(q + 1))
  for (const name of tlsParameters) query.delete(name)
  const rest = query.toString()
  return rest === '' ? url.slice(0, q) : `${url.slice(0, q)}?${rest}`
}

// PostgreSQL's SSLRequest: length 8, code 80877103.
const sslRequest = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])

/**
 * Secures a connected socket as `settings` ask: an SSLRequest, then a TLS handshake within
 * `timeoutMs` (verifying the chain for `verify-ca`, the chain and the host for `verify-full`).
 * A server that refuses TLS gets the plain socket back under `allow` or `prefer`, else an error.
 * The secure socket keeps a listener for errors for good: the driver drops its own when the
 * connection closes, and a late write error (a socket cut loose) would otherwise end the process.
 */
async function startTls(
  raw: Socket,
  host: string,
  settings: TlsSettings,
  timeoutMs: number,
  { secured, signal }: AttemptHooks,
): Promise<Socket> {
  const { mode } = settings
  const within = <T>(work: (resolve: (v: T) => void, reject: (e: Error) => void) => void) =>
    new Promise<T>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', aborted)
      }
      const fail = (err: Error) => {
        done()
        raw.destroy()
        reject(err)
      }
      const aborted = () => fail(failure('aborted', 'ECONNRESET'))
      const timer = setTimeout(
        () => fail(failure(`no TLS from ${host} within ${timeoutMs} ms`, 'CONNECT_TIMEOUT')),
        timeoutMs,
      )
      signal?.addEventListener('abort', aborted, { once: true })
      work((v) => {
        done()
        resolve(v)
      }, fail)
    })
  const answer = await within<number>((resolve, reject) => {
    raw.once('data', (d: Buffer) => resolve(d[0] ?? 0))
    raw.once('error', reject)
    raw.once('close', () => reject(failure(`connect ECONNRESET ${host}`, 'ECONNRESET')))
    raw.write(sslRequest)
  })
  raw.removeAllListeners('error')
  raw.removeAllListeners('close')
  raw.on('error', () => {})
  if (answer === 0x4e /* N */) {
    if (mode === 'allow' || mode === 'prefer') return raw
    raw.destroy()
    throw failure(`${host} does not take TLS connections (sslmode=${mode})`, 'ECONNREFUSED')
  }
  if (answer !== 0x53 /* S */) {
    raw.destroy()
    throw failure(`${host} answered the TLS request with ${answer}`, 'ECONNRESET')
  }
  const verify = mode === 'verify-ca' || mode === 'verify-full'
  const secure = tls.connect({
    socket: raw,
    host,
    ...(isIP(host) ? {} : { servername: host }),
    rejectUnauthorized: verify,
    ...(mode === 'verify-full' ? {} : { checkServerIdentity: () => undefined }),
    ...(settings.ca && { ca: settings.ca }),
    ...(settings.cert && { cert: settings.cert }),
    ...(settings.key && { key: settings.key }),
  })
  secured?.(raw, secure)
  secure.on('error', () => {})
  await within<void>((resolve, reject) => {
    secure.once('secureConnect', () => resolve())
    secure.once('error', reject)
  }).catch((err: unknown) => {
    secure.destroy()
    throw err
  })
  Object.assign(secure, {
    host: (raw as Socket & { host?: string }).host ?? host,
    port: (raw as Socket & { port?: number }).port,
  })
  return secure
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
  const settings = tlsSettingsOf(url)
  const attempt =
    (hooks: AttemptHooks): OpenSocket =>
    async (target) => {
      const timeoutMs = (target.connect_timeout ?? 30) * 1000
      if (target.path) return connectSocket({ path: target.path }, timeoutMs, hooks)
      if (hosts.length === 0)
        return openHost(
          { host: target.host[0] ?? 'localhost', port: target.port[0] ?? 5432 },
          settings,
          timeoutMs,
          hooks,
        )
      const problems: string[] = []
      let last: unknown
      for (const host of hosts) {
        if (hooks.signal?.aborted) break
        try {
          if (probe && !(await isWritableHost(host, timeoutMs, settings, hooks.signal))) {
            problems.push(`${host.host} does not take writes`)
            last = failure(`${host.host} does not take writes`, 'ECONNREFUSED')
            continue
          }
          return await openHost(whereOf(host), settings, timeoutMs, hooks)
        } catch (err) {
          last = err
          problems.push(`${host.host}: ${describeError(err)}`)
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
