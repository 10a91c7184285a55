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

/** A URL of an OTLP/HTTP receiver: http or https. */
const otlpUrl = v.pipe(
  v.string(),
  v.check(
    (s) => URL.canParse(s) && /^https?:$/.test(new URL(s).protocol),
    'must be an http:// or https:// URL',
  ),
)

const otlpProtocol = v.picklist(
  ['http/protobuf', 'http/json'],
  'must be http/protobuf or http/json (grpc is not supported)',
)

/** The OpenTelemetry specification's samplers, less those that need a remote service. */
export const samplers = [
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
  'always_on',
  'always_off',
  'traceidratio',
] as const

/** A number from 0 to 1 (a sampling ratio). */
const ratio = v.pipe(
  v.string(),
  v.regex(/^(?:0(?:\.\d+)?|1(?:\.0+)?|\.\d+)$/, 'must be a number from 0 to 1'),
  v.transform(Number),
)

/** A whole number of milliseconds (or items) from `least` to `most`. */
function wholeNumber(least: number, most: number) {
  const message = `must be an integer from ${least} to ${most}`
  return v.pipe(
    v.string(),
    v.regex(/^\d{1,9}$/, message),
    v.transform(Number),
    v.minValue(least, message),
    v.maxValue(most, message),
  )
}

/**
 * `key=value,…` as the OpenTelemetry specification writes resource attributes and headers: the
 * values (and keys) percent-encoded, spaces around each pair ignored.
 */
export function keyValueList(text: string): Record<string, string> | undefined {
  const out: Record<string, string> = {}
  for (const pair of text.split(',')) {
    if (pair.trim() === '') continue
    const at = pair.indexOf('=')
    if (at <= 0) return undefined
    try {
      const key = decodeURIComponent(pair.slice(0, at).trim())
      if (key === '') return undefined
      out[key] = decodeURIComponent(pair.slice(at + 1).trim())
    } catch {
      return undefined
    }
  }
  return out
}

const keyValues = v.pipe(
  v.string(),
  v.transform(keyValueList),
  v.check((r) => r !== undefined, 'must be key=value pairs separated by commas, percent-encoded'),
  v.transform((r) => r ?? {}),
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
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    key: 'otlpEndpoint',
    schema: v.optional(otlpUrl),
    default: undefined,
    unset: `no spans exported, and the OpenTelemetry SDK not loaded (unless \`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT\` is set)`,
    meaning: `base URL of an OTLP/HTTP receiver (an OpenTelemetry collector, say \`http://collector:4318\`): a span per request and one per insert statement go to its \`/v1/traces\` ([Spans](docs/observability.md#spans))`,
  },
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: {
    key: 'otlpTracesEndpoint',
    schema: v.optional(otlpUrl),
    default: undefined,
    unset: `\`OTEL_EXPORTER_OTLP_ENDPOINT\` and \`/v1/traces\``,
    meaning: `the full URL spans are sent to; wins over \`OTEL_EXPORTER_OTLP_ENDPOINT\``,
  },
  OTEL_EXPORTER_OTLP_PROTOCOL: {
    key: 'otlpProtocol',
    schema: otlpProtocol,
    default: 'http/protobuf',
    meaning: `\`http/protobuf\` or \`http/json\` (\`grpc\` is not supported)`,
  },
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: {
    key: 'otlpTracesProtocol',
    schema: v.optional(otlpProtocol),
    default: undefined,
    unset: `\`OTEL_EXPORTER_OTLP_PROTOCOL\``,
    meaning: `the protocol of spans; wins over \`OTEL_EXPORTER_OTLP_PROTOCOL\``,
  },
  OTEL_EXPORTER_OTLP_HEADERS: {
    key: 'otlpHeaders',
    schema: v.optional(keyValues),
    default: undefined,
    unset: `none`,
    meaning: `headers sent with every export, \`key=value,…\` percent-encoded (an API key, say; never logged)`,
  },
  OTEL_EXPORTER_OTLP_TIMEOUT: {
    key: 'otlpTimeout',
    schema: wholeNumber(1, 600_000),
    default: '10000',
    meaning: `milliseconds an export may take before it counts as failed`,
  },
  OTEL_EXPORTER_OTLP_COMPRESSION: {
    key: 'otlpCompression',
    schema: v.picklist(['gzip', 'none'], 'must be gzip or none'),
    default: 'none',
    meaning: `\`gzip\` or \`none\`: how each export's body is compressed`,
  },
  OTEL_TRACES_EXPORTER: {
    key: 'tracesExporter',
    schema: v.picklist(['otlp', 'none'], 'must be otlp or none'),
    default: 'otlp',
    meaning: `\`otlp\`, or \`none\`: no spans, whatever the endpoint`,
  },
  OTEL_SDK_DISABLED: {
    key: 'otelSdkDisabled',
    schema: v.pipe(
      v.string(),
      v.transform((s) => s.toLowerCase()),
      v.picklist(['true', 'false'], 'must be true or false'),
      v.transform((s) => s === 'true'),
    ),
    default: 'false',
    meaning: `\`true\`: no spans, whatever the endpoint`,
  },
  OTEL_SERVICE_NAME: {
    key: 'otelServiceName',
    schema: v.optional(v.pipe(v.string(), v.maxLength(255, 'must be at most 255 characters'))),
    default: undefined,
    unset: `\`service.name\` of \`OTEL_RESOURCE_ATTRIBUTES\`, else \`plant-store\``,
    meaning: `the \`service.name\` of the spans' resource`,
  },
  OTEL_RESOURCE_ATTRIBUTES: {
    key: 'otelResourceAttributes',
    schema: v.optional(keyValues),
    default: undefined,
    unset: `only what the service sets: \`service.name\`, \`service.version\`, \`service.instance.id\`, \`telemetry.sdk.*\``,
    meaning: `attributes of the spans' resource, \`key=value,…\` percent-encoded (\`deployment.environment.name=prod\`, say); they win over the service's own`,
  },
  OTEL_TRACES_SAMPLER: {
    key: 'tracesSampler',
    schema: v.picklist(samplers, `must be one of ${samplers.join(', ')}`),
    default: 'parentbased_always_on',
    meaning: `which requests' traces are recorded: ${samplers.map((s) => `\`${s}\``).join(', ')}; \`parentbased_*\` follow the caller's \`traceparent\` flag when there is one`,
  },
  OTEL_TRACES_SAMPLER_ARG: {
    key: 'tracesSamplerArg',
    schema: v.optional(ratio),
    default: undefined,
    unset: `1 for the \`traceidratio\` samplers`,
    meaning: `the share of traces (0 to 1) the \`traceidratio\` samplers record; ignored by the others`,
  },
  OTEL_BSP_SCHEDULE_DELAY: {
    key: 'bspScheduleDelay',
    schema: wholeNumber(0, 600_000),
    default: '5000',
    meaning: `milliseconds finished spans wait before they are sent (sooner once \`OTEL_BSP_MAX_EXPORT_BATCH_SIZE\` are waiting)`,
  },
  OTEL_BSP_EXPORT_TIMEOUT: {
    key: 'bspExportTimeout',
    schema: wholeNumber(1, 600_000),
    default: '30000',
    meaning: `milliseconds an export of spans may take in all, before the next may start`,
  },
  OTEL_BSP_MAX_QUEUE_SIZE: {
    key: 'bspMaxQueueSize',
    schema: wholeNumber(1, 1_000_000),
    default: '2048',
    meaning: `finished spans kept while they wait to be sent; beyond, a span is dropped and counted (\`plant_store_spans_dropped_total\`), never waited for`,
  },
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: {
    key: 'bspMaxExportBatchSize',
    schema: wholeNumber(1, 1_000_000),
    default: '512',
    meaning: `spans sent in one export at most (at most \`OTEL_BSP_MAX_QUEUE_SIZE\`)`,
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
  WARM_UP_CREATES: {
    key: 'warmUpCreates',
    schema: wholeNumber(0, limits.warmUp.mostCreates),
    default: String(limits.warmUp.creates),
    why: `what a fresh process would make its first clients pay (code not yet optimised, statements not yet prepared, the first connections not yet accepted) is paid before it listens, at the cost of about 3 s of start-up ([BENCHMARKS.md](BENCHMARKS.md#the-warm-ups-creates-shaped-as-clients-are))`,
    meaning: `creates run through a private copy of the service before it listens, on its own connections, storing nothing ([the warm-up](docs/scaling.md#below-the-peak-when-a-create-goes-and-a-new-instances-first-seconds)); 0 to ${limits.warmUp.mostCreates}; \`0\` only connects and prepares the statements, for a start as fast as can be`,
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

/** Where and how spans are exported (the `OTEL_*` variables), when they are. */
export type SpanSettings = {
  /** The URL spans are posted to. */
  readonly url: string
  readonly protocol: 'http/protobuf' | 'http/json'
  readonly headers: Readonly<Record<string, string>>
  readonly timeoutMs: number
  readonly compression: 'gzip' | 'none'
  /** `service.name`: OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES', else `plant-store`. */
  readonly serviceName: string
  readonly resourceAttributes: Readonly<Record<string, string>>
  readonly sampler: (typeof samplers)[number]
  /** The `traceidratio` samplers' share of traces. */
  readonly ratio: number
  readonly batch: {
    readonly scheduledDelayMillis: number
    readonly exportTimeoutMillis: number
    readonly maxQueueSize: number
    readonly maxExportBatchSize: number
  }
}

/**
 * The validated, frozen settings of one process, one key per variable (`variables`), and what
 * else it reads from its environment. Only `parseConfig` reads the environment.
 */
export type Config = {
  readonly [N in keyof Variables as Variables[N]['key']]: v.InferOutput<Variables[N]['schema']>
} & ProcessEnvironment & {
    /** Spans are exported (an OTLP endpoint is set, and neither the SDK nor exporter is off). */
    readonly spans: SpanSettings | undefined
  }

type Parsed = v.InferOutput<typeof EnvSchema>

/**
 * The span settings, read as the OpenTelemetry specification reads them: the traces endpoint as
 * it is, else the endpoint with `v1/traces` appended; the traces protocol, else the protocol.
 */
function spanSettings(out: Parsed): SpanSettings | undefined {
  const endpoint = out.OTEL_EXPORTER_OTLP_ENDPOINT
  const url =
    out.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
    (endpoint === undefined ? undefined : `${endpoint.replace(/\/?$/, '/')}v1/traces`)
  if (url === undefined || out.OTEL_SDK_DISABLED || out.OTEL_TRACES_EXPORTER === 'none')
    return undefined
  if (!out.TRACE_CONTEXT)
    throw new ConfigError(
      'invalid setting TRACE_CONTEXT="off": spans need the trace context; unset OTEL_EXPORTER_OTLP_ENDPOINT (or set OTEL_TRACES_EXPORTER=none) to export none',
    )
  const batch = {
    scheduledDelayMillis: out.OTEL_BSP_SCHEDULE_DELAY,
    exportTimeoutMillis: out.OTEL_BSP_EXPORT_TIMEOUT,
    maxQueueSize: out.OTEL_BSP_MAX_QUEUE_SIZE,
    maxExportBatchSize: out.OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
  }
  if (batch.maxExportBatchSize > batch.maxQueueSize)
    throw new ConfigError(
      `invalid setting OTEL_BSP_MAX_EXPORT_BATCH_SIZE="${batch.maxExportBatchSize}": must be at most OTEL_BSP_MAX_QUEUE_SIZE (${batch.maxQueueSize})`,
    )
  const resourceAttributes = out.OTEL_RESOURCE_ATTRIBUTES ?? {}
  return Object.freeze({
    url,
    protocol: out.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? out.OTEL_EXPORTER_OTLP_PROTOCOL,
    headers: out.OTEL_EXPORTER_OTLP_HEADERS ?? {},
    timeoutMs: out.OTEL_EXPORTER_OTLP_TIMEOUT,
    compression: out.OTEL_EXPORTER_OTLP_COMPRESSION,
    serviceName: out.OTEL_SERVICE_NAME ?? resourceAttributes['service.name'] ?? 'plant-store',
    resourceAttributes,
    sampler: out.OTEL_TRACES_SAMPLER,
    ratio: out.OTEL_TRACES_SAMPLER_ARG ?? 1,
    batch,
  })
}

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
      // Headers may hold an API key: named, never echoed either.
      const shown =
        name.endsWith('_URL') || name.endsWith('_HEADERS') ? '' : `=${JSON.stringify(input[name])}`
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
  const spans = spanSettings(out)
  return Object.freeze({
    ...Object.fromEntries(
      Object.entries(variables).map(([name, variable]) => [
        variable.key,
        out[name as keyof typeof out],
      ]),
    ),
    ...environment,
    spans,
  }) as Config
}
