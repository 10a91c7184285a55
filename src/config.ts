import { readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import { availableParallelism } from 'node:os'
import * as v from 'valibot'
import { hostUrls } from './db/reach/url.ts'
import { limits } from './limits.ts'
import { logLevels } from './log.ts'

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

const { maxCount, maxWorkers, reservedHandles, minConnections } = limits.settings

/**
 * A whole number from 1 to `most`, or the word `word` (which `word` maps to a value). The
 * message names the range as the README does.
 */
function countOr<W extends string, T>(word: W, most: number, wordValue: () => T) {
  const message = `must be ${word} or an integer from 1 to ${most}`
  return v.pipe(
    v.string(),
    v.check((s) => s === word || (/^[1-9][0-9]*$/.test(s) && Number(s) <= most), message),
    v.transform((s) => (s === word ? wordValue() : Number(s))),
  )
}

const workers = countOr('auto', maxWorkers, availableParallelism)

const maxConnections = countOr('auto', maxCount, () => connectionsForFileLimit())

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
  return Math.max(minConnections, Number(soft) - reservedHandles)
}

/** `off`, or a whole number from 1 to 1,000,000. */
const countOrOff = countOr('off', maxCount, () => undefined)

// Unset, it is the empty list: nobody's X-Forwarded-For is believed.
const addressList = v.pipe(
  v.optional(v.string(), ''),
  v.transform((s) => (s === '' ? [] : s.split(',').map((a) => a.trim()))),
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

/** Seconds, whole or with up to three decimals, from 0 to 60, as milliseconds. */
const seconds = v.pipe(
  v.string(),
  v.regex(/^\d{1,2}(?:\.\d{1,3})?$/, 'must be a number of seconds from 0 to 60'),
  v.transform((s) => Math.round(Number(s) * 1000)),
  v.maxValue(60_000, 'must be a number of seconds from 0 to 60'),
)

// An own port for GET /metrics: 0 is not allowed (the log could not say where it went).
const ownPort = v.pipe(
  v.string(),
  v.regex(/^[1-9]\d{0,4}$/, 'must be an integer from 1 to 65535'),
  v.transform(Number),
  v.maxValue(65535, 'must be an integer from 1 to 65535'),
)

/**
 * Every environment variable, declared once: the Config key it sets, how it is parsed, its
 * default (`undefined`: none; `unset` says what that means, `why` explains a default), and the
 * README's words for it (`meaning`). `test/readme-tables.test.ts` checks the README's
 * configuration table, row by row, against this.
 */
export const variables = {
  DATABASE_URL: {
    key: 'databaseUrl',
    schema: v.optional(databaseUrl),
    default: undefined,
    unset: `embedded PostgreSQL with its data in \`.data/\`, kept across restarts, and settings for a growing table`,
    meaning: `PostgreSQL to use (\`postgres://user:password@host:5432/db\`; several hosts as libpq lists them, for [failover](docs/scaling.md#running-several-instances); libpq's \`sslmode\` and \`sslrootcert\` for [TLS](docs/operations.md#tls-to-the-database)); the tests run on 18, failover and TLS on 15 too (12 and later should work). The service warns at start about settings that hurt a growing table ([settings](docs/operations.md#postgresql-settings-for-a-growing-table))`,
  },
  DATABASE_POOL_MODE: {
    key: 'poolMode',
    schema: v.picklist(['session', 'transaction'], 'must be session or transaction'),
    default: 'session',
    meaning: `\`session\` (PostgreSQL itself, or a pooler in session mode) or \`transaction\` (DATABASE_URL leads to a pooler in transaction mode, such as PgBouncer: see [Connection poolers](docs/scaling.md#running-several-instances))`,
  },
  DATABASE_DIRECT_URL: {
    key: 'databaseDirectUrl',
    schema: v.optional(databaseUrl),
    default: undefined,
    unset: `DATABASE_URL`,
    meaning: `a session connection to the same database (PostgreSQL itself, or a session-mode pool), for migrations, \`LISTEN\` and the commands; needed with \`DATABASE_POOL_MODE=transaction\`; with \`DATABASE_URL\` naming a Citus worker, its coordinator (as a primary and its standby, say), else read from the worker's metadata`,
  },
  PORT: {
    key: 'port',
    schema: port,
    default: '8080',
    meaning: `HTTP port; \`0\` picks a free one (the log says which)`,
  },
  HOST: {
    key: 'host',
    schema: hostOrAddress,
    default: '127.0.0.1',
    meaning: `address to bind`,
  },
  LOG_LEVEL: {
    key: 'logLevel',
    schema: v.picklist(logLevels, `must be one of ${logLevels.join(', ')}`),
    default: 'info',
    meaning: `\`debug\`, \`info\`, \`warn\` or \`error\``,
  },
  METRICS: {
    key: 'metrics',
    schema: onOff,
    default: 'on',
    meaning: `\`on\`: serve \`GET /metrics\` (see [Observability](docs/observability.md)); \`off\`: no \`/metrics\` (404) and no counting`,
  },
  METRICS_PORT: {
    key: 'metricsPort',
    schema: v.optional(ownPort),
    default: undefined,
    unset: `on the service's port, to whoever can reach it`,
    meaning: `serve \`GET /metrics\` on this port (1 to 65535, not \`PORT\`) instead of the service's port, which then answers it 404`,
  },
  METRICS_HOST: {
    key: 'metricsHost',
    schema: hostOrAddress,
    default: '127.0.0.1',
    meaning: `address the \`METRICS_PORT\` server binds`,
  },
  TRACE_CONTEXT: {
    key: 'traceContext',
    schema: onOff,
    default: 'on',
    meaning: `\`on\`: keep or start a W3C trace context per request (\`traceparent\`); \`off\`: none`,
  },
  WORKERS: {
    key: 'workers',
    schema: workers,
    default: '1',
    meaning: `processes serving HTTP: \`1\` is this process alone; \`2\` to \`${maxWorkers}\`, or \`auto\` (one per core this process may use), start that many \`node:cluster\` workers on the one port (see [Worker processes](docs/scaling.md#worker-processes)); Node only`,
  },
  MIGRATE: {
    key: 'migrate',
    schema: onOff,
    default: 'on',
    meaning: `\`on\`: apply pending migrations at start; \`off\`: only check that none is pending, and stop with one line if one is: for a role that may not create tables, while the owner runs \`npm run migrate\` ([least privilege](docs/operations.md#least-privilege-in-the-database))`,
  },
  AUTH_FAILURE_LIMIT: {
    key: 'authFailureLimit',
    schema: countOrOff,
    default: String(limits.authFailures.allowed),
    meaning: `failed authentications (401 and 40010) a client address may make per ${limits.authFailures.windowSeconds} s; past it, 429 / 42901. Only failures count: a request with a valid token is never refused for them, whoever else shares its address. \`off\` or 1 to ${maxCount}`,
  },
  RATE_LIMIT: {
    key: 'rateLimit',
    schema: countOrOff,
    default: 'off',
    why: `tokens are issued by operators to clients they know, and the database's own rate is the limit that matters`,
    meaning: `requests a token may make per second (a bucket of that many, refilled at that rate); past it, 429 / 42902, and every answer to the token carries the IETF \`RateLimit\` and \`RateLimit-Policy\` fields. \`off\` or 1 to ${maxCount}`,
  },
  TRUSTED_PROXIES: {
    key: 'trustedProxies',
    schema: addressList,
    default: undefined,
    unset: `the peer's address is the client`,
    meaning: `IP addresses of proxies whose \`X-Forwarded-For\` names the client, comma-separated: the nearest address in it that is not a trusted proxy is then the client, in the log and for \`AUTH_FAILURE_LIMIT\`; from anyone else the field is ignored`,
  },
  DRAIN_DELAY: {
    key: 'drainDelay',
    schema: seconds,
    default: String(limits.drainDelay / 1000),
    why: `a balancer that checks \`/readyz\` every second or two has stopped sending by then, and the whole stop still fits ${limits.drain / 1000} s`,
    meaning: `seconds an instance goes on serving after \`SIGTERM\`, its \`/readyz\` 503 and every answer \`Connection: close\`, before it stops accepting and finishes the requests in flight (in what is left of ${limits.drain / 1000} s, at least ${limits.drainInFlight / 1000} s); 0 to 60 ([rolling deploys](docs/operations.md#a-rolling-deploy)). \`SIGINT\` stops at once`,
  },
  MAX_CONNECTIONS: {
    key: 'maxConnections',
    schema: maxConnections,
    default: 'auto',
    why: `the process's open-file limit less ${reservedHandles} (for the pool, \`LISTEN\` and the log), at least ${minConnections}; no cap where the limit cannot be read`,
    meaning: `open client connections at most, per process; more are closed as soon as they are accepted; \`auto\` or 1 to ${maxCount}`,
  },
} as const

type Variables = typeof variables

const EnvSchema = v.object(
  Object.fromEntries(
    Object.entries(variables).map(([name, variable]) => [name, variable.schema]),
  ) as {
    [N in keyof Variables]: Variables[N]['schema']
  },
)

/**
 * What a process reads from its environment besides the settings of `variables` (which the
 * README's table lists): Node's own variable for cluster scheduling, and one command's secret.
 */
type ProcessEnvironment = {
  /**
   * NODE_CLUSTER_SCHED_POLICY is set: Node's own choice of how WORKERS take connections stands
   * (else each worker accepts its own, primary.ts).
   */
  readonly nodeSchedulingPolicy: boolean
  /** APP_ROLE_PASSWORD: `npm run grant` sets it as the role's password (unset: none set). */
  readonly appRolePassword: string | undefined
}

/**
 * The validated, frozen settings of one process, one key per variable (`variables`), and what
 * else it reads from its environment. Only `parseConfig` reads the environment.
 */
export type Config = {
  readonly [N in keyof Variables as Variables[N]['key']]: v.InferOutput<Variables[N]['schema']>
} & ProcessEnvironment

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
  for (const [name, variable] of Object.entries(variables)) {
    const value = env[name]
    const chosen = value === undefined || value === '' ? variable.default : value
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
  const environment: ProcessEnvironment = {
    nodeSchedulingPolicy: env.NODE_CLUSTER_SCHED_POLICY !== undefined,
    appRolePassword: env.APP_ROLE_PASSWORD || undefined,
  }
  return Object.freeze({
    ...Object.fromEntries(
      Object.entries(variables).map(([name, variable]) => [
        variable.key,
        out[name as keyof typeof out],
      ]),
    ),
    ...environment,
  }) as Config
}
