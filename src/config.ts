import { readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import { availableParallelism } from 'node:os'
import * as v from 'valibot'
import { hostUrls } from './db/database-url.ts'
import { limits } from './limits.ts'
import { type LogLevel, logLevels } from './log.ts'

/** The settings table: each variable with its default (`undefined`: none); the README explains them. */
export const settings = {
  DATABASE_URL: { default: undefined },
  DATABASE_POOL_MODE: { default: 'session' },
  DATABASE_DIRECT_URL: { default: undefined },
  PORT: { default: '8080' },
  HOST: { default: '127.0.0.1' },
  LOG_LEVEL: { default: 'info' },
  METRICS: { default: 'on' },
  METRICS_PORT: { default: undefined },
  METRICS_HOST: { default: '127.0.0.1' },
  TRACE_CONTEXT: { default: 'on' },
  WORKERS: { default: '1' },
  MAX_CONNECTIONS: { default: 'auto' },
  AUTH_FAILURE_LIMIT: { default: String(limits.authFailures.allowed) },
  RATE_LIMIT: { default: 'off' },
  MIGRATE: { default: 'on' },
  TRUSTED_PROXIES: { default: undefined },
} as const

const onOff = v.pipe(
  v.picklist(['on', 'off'], 'must be on or off'),
  v.transform((s) => s === 'on'),
)

const databaseUrl = v.pipe(
  v.string(),
  v.check(
    (s) => hostUrls(s) !== undefined,
    'must be a URL such as postgres://user:password@host:5432/database (hosts may be a list: host1:5432,host2:5432)',
  ),
)

const port = v.pipe(
  v.string(),
  v.regex(/^\d{1,5}$/, 'must be an integer from 0 to 65535'),
  v.transform(Number),
  v.maxValue(65535, 'must be an integer from 0 to 65535'),
)

const workers = v.pipe(
  v.string(),
  v.regex(/^(?:auto|[1-9][0-9]{0,2})$/, 'must be auto or an integer from 1 to 256'),
  v.transform((s) => (s === 'auto' ? availableParallelism() : Number(s))),
  v.maxValue(256, 'must be auto or an integer from 1 to 256'),
)

const maxConnections = v.pipe(
  v.string(),
  v.regex(/^(?:auto|[1-9][0-9]{0,6})$/, 'must be auto or an integer from 1 to 1000000'),
  v.transform((s) => (s === 'auto' ? connectionsForFileLimit() : Number(s))),
)

/** File handles the service keeps apart from client connections: the pool, LISTEN, the log. */
const reservedHandles = 100

/**
 * MAX_CONNECTIONS=auto: the process's limit of open files (Linux: /proc/self/limits) less what
 * the service needs besides, so that accepting one more connection never leaves the pool
 * without a file handle. `undefined` (no cap) where the limit cannot be read.
 */
export function connectionsForFileLimit(
  read = () => readFileSync('/proc/self/limits', 'utf8'),
): number | undefined {
  let text: string
  try {
    text = read()
  } catch {
    return undefined
  }
  const soft = /^Max open files\s+(\d+|unlimited)/m.exec(text)?.[1]
  if (soft === undefined || soft === 'unlimited') return undefined
  return Math.max(16, Number(soft) - reservedHandles)
}

/** `off`, or a whole number from 1 to 1,000,000. */
const countOrOff = v.pipe(
  v.string(),
  v.regex(/^(?:off|[1-9][0-9]{0,6})$/, 'must be off or an integer from 1 to 1000000'),
  v.transform((s) => (s === 'off' ? undefined : Number(s))),
)

const addressList = v.pipe(
  v.string(),
  v.transform((s) => s.split(',').map((a) => a.trim())),
  v.check((list) => list.every((a) => isIP(a) !== 0), 'must be IP addresses separated by commas'),
  v.transform((list) => new Set(list)),
)

/**
 * An address to bind: an IP address (v4 or v6), or a host name (RFC 1123: dot-separated labels of
 * letters, digits and inner hyphens, 253 characters at most). A name of numbers alone must be an
 * IPv4 address, so `999.999.1.1` is refused here rather than by the resolver after start-up.
 */
export function isHostOrAddress(text: string): boolean {
  if (isIP(text) !== 0) return true
  if (text.length > 253) return false
  const labels = text.split('.')
  if (!labels.every((l) => /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(l))) return false
  return !labels.every((l) => /^\d+$/.test(l))
}

const hostOrAddress = v.pipe(
  v.string(),
  v.check(isHostOrAddress, 'must be a host name or an IP address'),
)

const EnvSchema = v.object({
  DATABASE_URL: v.optional(databaseUrl),
  DATABASE_POOL_MODE: v.picklist(['session', 'transaction'], 'must be session or transaction'),
  DATABASE_DIRECT_URL: v.optional(databaseUrl),
  PORT: port,
  HOST: hostOrAddress,
  LOG_LEVEL: v.picklist(logLevels, `must be one of ${logLevels.join(', ')}`),
  METRICS: onOff,
  METRICS_PORT: v.optional(
    v.pipe(
      v.string(),
      v.regex(/^[1-9]\d{0,4}$/, 'must be an integer from 1 to 65535'),
      v.transform(Number),
      v.maxValue(65535, 'must be an integer from 1 to 65535'),
    ),
  ),
  METRICS_HOST: hostOrAddress,
  TRACE_CONTEXT: onOff,
  WORKERS: workers,
  MAX_CONNECTIONS: maxConnections,
  AUTH_FAILURE_LIMIT: countOrOff,
  RATE_LIMIT: countOrOff,
  MIGRATE: onOff,
  TRUSTED_PROXIES: v.optional(addressList),
})

/** The validated, frozen settings of one process. */
export type Config = Readonly<{
  databaseUrl: string | undefined
  /**
   * `transaction` when DATABASE_URL leads to a pooler in transaction mode (PgBouncer): no
   * prepared statements and no session settings; migrations and LISTEN use `databaseDirectUrl`.
   */
  poolMode: 'session' | 'transaction'
  /** A session connection to PostgreSQL itself, for migrations and LISTEN. */
  databaseDirectUrl: string | undefined
  port: number
  host: string
  logLevel: LogLevel
  /** Serve GET /metrics and keep the counters behind it. */
  metrics: boolean
  /**
   * Where GET /metrics is served instead of the service's port: a port of its own, on
   * `metricsHost` (loopback unless told otherwise). `undefined`: on the service's port.
   */
  metricsPort: number | undefined
  metricsHost: string
  /** Keep or start a W3C trace context per request: `traceparent` and the log's trace ids. */
  traceContext: boolean
  /** Processes serving HTTP: 1 is this process alone; more are node:cluster workers. */
  workers: number
  /** Open client connections at most (per process); `undefined`: no cap. */
  maxConnections: number | undefined
  /**
   * Failed authentications a client address may make per window (`limits.authFailures`) before
   * it gets 429 (42901); `undefined`: no limit.
   */
  authFailureLimit: number | undefined
  /** Requests a token may make per second before it gets 429 (42902); `undefined`: no limit. */
  rateLimit: number | undefined
  /** Proxies whose X-Forwarded-For names the client. */
  trustedProxies: ReadonlySet<string>
  /**
   * Apply pending migrations at start (on), or only check that none is pending (off: the role
   * may lack the right to create tables, and the owner migrates with `npm run migrate`).
   */
  migrate: boolean
}>

/** Thrown by `parseConfig`; its message is one line naming every invalid variable. */
export class ConfigError extends Error {
  override name = 'ConfigError'
}

/**
 * Validates the environment once at start-up and applies the defaults. An empty variable counts
 * as unset, as it does in most deployment tools.
 */
export function parseConfig(env: Readonly<Record<string, string | undefined>>): Config {
  const input: Record<string, string> = {}
  for (const [name, setting] of Object.entries(settings)) {
    const value = env[name]
    const chosen = value === undefined || value === '' ? setting.default : value
    if (chosen !== undefined) input[name] = chosen
  }
  const result = v.safeParse(EnvSchema, input)
  if (!result.success) {
    const problems = result.issues.map((issue) => {
      const name = String(issue.path?.[0]?.key)
      // A database URL may hold a password: name it, never echo it.
      const shown = name.endsWith('_URL') ? '' : `=${JSON.stringify(input[name])}`
      return `${name}${shown}: ${issue.message}`
    })
    throw new ConfigError(`invalid setting ${problems.join('; ')}`)
  }
  const out = result.output
  if (out.DATABASE_POOL_MODE === 'transaction' && out.DATABASE_DIRECT_URL === undefined) {
    throw new ConfigError(
      'invalid setting DATABASE_POOL_MODE=transaction: needs DATABASE_DIRECT_URL, a session connection (PostgreSQL itself, or a session-mode pool) for migrations and LISTEN',
    )
  }
  if (out.METRICS_PORT !== undefined && out.METRICS_PORT === out.PORT) {
    throw new ConfigError(
      `invalid setting METRICS_PORT=${JSON.stringify(String(out.METRICS_PORT))}: must differ from PORT`,
    )
  }
  return Object.freeze({
    databaseUrl: out.DATABASE_URL,
    poolMode: out.DATABASE_POOL_MODE,
    databaseDirectUrl: out.DATABASE_DIRECT_URL,
    port: out.PORT,
    host: out.HOST,
    logLevel: out.LOG_LEVEL,
    metrics: out.METRICS,
    metricsPort: out.METRICS_PORT,
    metricsHost: out.METRICS_HOST,
    traceContext: out.TRACE_CONTEXT,
    workers: out.WORKERS,
    maxConnections: out.MAX_CONNECTIONS,
    authFailureLimit: out.AUTH_FAILURE_LIMIT,
    rateLimit: out.RATE_LIMIT,
    trustedProxies: out.TRUSTED_PROXIES ?? new Set<string>(),
    migrate: out.MIGRATE,
  })
}
