import assert from 'node:assert/strict'
import { availableParallelism } from 'node:os'
import { describe, test } from 'node:test'
import { ConfigError, connectionsForFileLimit, parseConfig } from '../src/config.ts'
import { hostConnector } from '../src/db/reach/hosts.ts'
import { describeDatabase, driverUrl, hostUrls, readDatabaseUrl } from '../src/db/reach/url.ts'
import { runMain } from './helpers/cli.ts'

// The OTEL_* settings unset: no spans.
const spanDefaults = {
  otlpEndpoint: undefined,
  otlpTracesEndpoint: undefined,
  otlpProtocol: 'http/protobuf',
  otlpTracesProtocol: undefined,
  otlpHeaders: undefined,
  otlpTimeout: 10_000,
  otlpCompression: 'none',
  tracesExporter: 'otlp',
  otelSdkDisabled: false,
  otelServiceName: undefined,
  otelResourceAttributes: undefined,
  tracesSampler: 'parentbased_always_on',
  tracesSamplerArg: undefined,
  bspScheduleDelay: 5000,
  bspExportTimeout: 30_000,
  bspMaxQueueSize: 2048,
  bspMaxExportBatchSize: 512,
  spans: undefined,
}

describe('configuration', () => {
  test('defaults: embedded database, port 8080, 127.0.0.1, info, metrics and trace context on, one process, a 3-s drain delay', () => {
    assert.deepEqual(
      { ...parseConfig({}) },
      {
        databaseUrl: undefined,
        port: 8080,
        host: '127.0.0.1',
        logLevel: 'info',
        metrics: true,
        traceContext: true,
        poolMode: 'session',
        databaseDirectUrl: undefined,
        workers: 1,
        maxConnections: connectionsForFileLimit(),
        metricsPort: undefined,
        metricsHost: '127.0.0.1',
        authFailureLimit: 100,
        rateLimit: undefined,
        trustedProxies: new Set(),
        migrate: true,
        drainDelay: 3000,
        warmUpCreates: 10000,
        nodeSchedulingPolicy: false,
        appRolePassword: undefined,
        ...spanDefaults,
      },
    )
  })

  test('DATABASE_URL may list several hosts, as libpq writes them; messages name them all, never the password', () => {
    const url =
      'postgres://u:s3cret@h1:5432,h2:5433,[::1]:5434/plants?target_session_attrs=read-write'
    assert.equal(parseConfig({ DATABASE_URL: url }).databaseUrl, url)
    assert.deepEqual(
      hostUrls(url)?.map((u) => u.host),
      ['h1:5432', 'h2:5433', '[::1]:5434'],
    )
    assert.equal(describeDatabase(url), 'h1:5432,h2:5433,[::1]:5434/plants as u')
    assert.throws(() => parseConfig({ DATABASE_URL: 'postgres://u@h1:5432,h2:x/db' }), ConfigError)
  })

  test('DATABASE_POOL_MODE=transaction needs DATABASE_DIRECT_URL; with it, both are read', () => {
    assert.throws(
      () =>
        parseConfig({
          DATABASE_URL: 'postgres://u:p@bouncer/db',
          DATABASE_POOL_MODE: 'transaction',
        }),
      (err: Error) => err instanceof ConfigError && /DATABASE_DIRECT_URL/.test(err.message),
    )
    const config = parseConfig({
      DATABASE_URL: 'postgres://u:p@bouncer:6432/db',
      DATABASE_POOL_MODE: 'transaction',
      DATABASE_DIRECT_URL: 'postgres://u:p@db:5432/db',
    })
    assert.equal(config.poolMode, 'transaction')
    assert.equal(config.databaseDirectUrl, 'postgres://u:p@db:5432/db')
  })

  test('variables are read and an empty one counts as unset', () => {
    const config = parseConfig({
      DATABASE_URL: 'postgres://u:p@db:5432/plants',
      PORT: '0',
      HOST: '0.0.0.0',
      LOG_LEVEL: '',
      METRICS: 'off',
      TRACE_CONTEXT: 'off',
      WORKERS: '3',
      MAX_CONNECTIONS: '500',
      METRICS_PORT: '9464',
      AUTH_FAILURE_LIMIT: 'off',
      RATE_LIMIT: '50',
      TRUSTED_PROXIES: '10.0.0.1, ::1',
      MIGRATE: 'off',
      DRAIN_DELAY: '1.5',
      WARM_UP_CREATES: '0',
      NODE_CLUSTER_SCHED_POLICY: 'rr',
      APP_ROLE_PASSWORD: 'p4ss',
    })
    assert.deepEqual(
      { ...config },
      {
        databaseUrl: 'postgres://u:p@db:5432/plants',
        port: 0,
        host: '0.0.0.0',
        logLevel: 'info',
        metrics: false,
        traceContext: false,
        poolMode: 'session',
        databaseDirectUrl: undefined,
        workers: 3,
        maxConnections: 500,
        metricsPort: 9464,
        metricsHost: '127.0.0.1',
        authFailureLimit: undefined,
        rateLimit: 50,
        trustedProxies: new Set(['10.0.0.1', '::1']),
        migrate: false,
        drainDelay: 1500,
        warmUpCreates: 0,
        nodeSchedulingPolicy: true,
        appRolePassword: 'p4ss',
        ...spanDefaults,
      },
    )
    assert.ok(Object.isFrozen(config))
  })

  for (const [name, value] of [
    ['PORT', 'eighty'],
    ['PORT', '65536'],
    ['PORT', '-1'],
    ['LOG_LEVEL', 'verbose'],
    ['DATABASE_URL', 'mysql://x'],
    ['DATABASE_URL', 'not a url'],
    ['HOST', 'two words'],
    ['HOST', '999.999.1.1'],
    ['HOST', 'not_a_host'],
    ['HOST', '-leading.example'],
    ['METRICS', 'yes'],
    ['TRACE_CONTEXT', 'false'],
    ['DATABASE_POOL_MODE', 'statement'],
    ['DATABASE_DIRECT_URL', 'mysql://x'],
    ['WORKERS', '0'],
    ['WORKERS', '257'],
    ['WORKERS', 'all'],
    ['WORKERS', '2.5'],
    ['MAX_CONNECTIONS', '0'],
    ['MAX_CONNECTIONS', 'many'],
    ['MAX_CONNECTIONS', '1000001'],
    ['MAX_CONNECTIONS', '9999999'],
    ['METRICS_PORT', '0'],
    ['METRICS_PORT', '65536'],
    ['METRICS_PORT', '8080'],
    ['METRICS_HOST', 'two words'],
    ['METRICS_HOST', '300.1.1.1'],
    ['AUTH_FAILURE_LIMIT', 'lots'],
    ['RATE_LIMIT', '0'],
    ['RATE_LIMIT', '1000001'],
    ['AUTH_FAILURE_LIMIT', '9999999'],
    ['TRUSTED_PROXIES', 'proxy.local'],
    ['MIGRATE', 'maybe'],
    ['DRAIN_DELAY', '61'],
    ['DRAIN_DELAY', '-1'],
    ['DRAIN_DELAY', '2s'],
    ['DRAIN_DELAY', '0.0001'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'grpc://collector:4317'],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'not a url'],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc'],
    ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'http/xml'],
    ['OTEL_EXPORTER_OTLP_HEADERS', 'no-equals-sign'],
    ['OTEL_EXPORTER_OTLP_HEADERS', 'k=%zz'],
    ['OTEL_EXPORTER_OTLP_TIMEOUT', '0'],
    ['OTEL_EXPORTER_OTLP_TIMEOUT', '10s'],
    ['OTEL_EXPORTER_OTLP_COMPRESSION', 'zstd'],
    ['OTEL_TRACES_EXPORTER', 'jaeger'],
    ['OTEL_SDK_DISABLED', 'yes'],
    ['OTEL_RESOURCE_ATTRIBUTES', '=value'],
    ['OTEL_TRACES_SAMPLER', 'jaeger_remote'],
    ['OTEL_TRACES_SAMPLER_ARG', '1.5'],
    ['OTEL_TRACES_SAMPLER_ARG', '-0.1'],
    ['OTEL_TRACES_SAMPLER_ARG', 'half'],
    ['OTEL_BSP_SCHEDULE_DELAY', '-1'],
    ['OTEL_BSP_MAX_QUEUE_SIZE', '0'],
    ['WARM_UP_CREATES', '-1'],
    ['WARM_UP_CREATES', '100001'],
    ['WARM_UP_CREATES', 'some'],
  ] as const) {
    test(`${name}=${value} is refused naming ${name}`, () => {
      assert.throws(
        () => parseConfig({ [name]: value }),
        (err: Error) => err instanceof ConfigError && err.message.includes(name),
      )
    })
  }

  test('the counting settings take 1,000,000 at most, as their messages and the README say', () => {
    const config = parseConfig({
      MAX_CONNECTIONS: '1000000',
      RATE_LIMIT: '1000000',
      AUTH_FAILURE_LIMIT: '1000000',
    })
    assert.equal(config.maxConnections, 1_000_000)
    assert.equal(config.rateLimit, 1_000_000)
    assert.equal(config.authFailureLimit, 1_000_000)
    assert.throws(
      () => parseConfig({ MAX_CONNECTIONS: '1000001' }),
      /MAX_CONNECTIONS="1000001": must be auto or an integer from 1 to 1000000/,
    )
  })

  test('MAX_CONNECTIONS=auto is the open-file limit less 100 handles for the pool and the log, at least 16; no cap where the limit cannot be read', () => {
    const limits = (soft: string) => () =>
      `Limit                     Soft Limit           Hard Limit           Units\nMax open files            ${soft}                1048576              files\n`
    assert.equal(connectionsForFileLimit(limits('20000')), 19_900)
    assert.equal(connectionsForFileLimit(limits('64')), 16)
    assert.equal(connectionsForFileLimit(limits('unlimited')), undefined)
    assert.equal(
      connectionsForFileLimit(() => {
        throw new Error('ENOENT')
      }),
      undefined,
    )
    assert.equal(parseConfig({}).maxConnections, connectionsForFileLimit())
  })

  test('WORKERS=auto is one worker per core this process may use', () => {
    assert.equal(parseConfig({ WORKERS: 'auto' }).workers, availableParallelism())
  })

  test('every invalid variable is named in one message, and a database password is never echoed', () => {
    assert.throws(
      () => parseConfig({ PORT: 'x', LOG_LEVEL: 'loud', DATABASE_URL: 'http://user:s3cret@host' }),
      (err: Error) =>
        /PORT/.test(err.message) &&
        /LOG_LEVEL/.test(err.message) &&
        /DATABASE_URL/.test(err.message) &&
        !err.message.includes('s3cret'),
    )
  })

  test('the OTEL_* settings are read as the OpenTelemetry specification reads them: the traces endpoint as it is, else the endpoint with v1/traces; the traces protocol first; service.name from OTEL_SERVICE_NAME, else the resource attributes, else plant-store', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }
    assert.equal(parseConfig(base).spans?.url, 'http://collector:4318/v1/traces')
    assert.equal(
      parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c.example/otlp/' }).spans?.url,
      'https://c.example/otlp/v1/traces',
    )
    assert.equal(
      parseConfig({ ...base, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:4318/spans' }).spans
        ?.url,
      'http://other:4318/spans',
    )
    assert.equal(parseConfig(base).spans?.protocol, 'http/protobuf')
    assert.equal(
      parseConfig({
        ...base,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      }).spans?.protocol,
      'http/json',
    )
    assert.equal(parseConfig(base).spans?.serviceName, 'plant-store')
    const named = parseConfig({
      ...base,
      OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-attributes,k=a%20b',
    }).spans
    assert.equal(named?.serviceName, 'from-attributes')
    assert.deepEqual(named?.resourceAttributes, { 'service.name': 'from-attributes', k: 'a b' })
    assert.equal(
      parseConfig({
        ...base,
        OTEL_SERVICE_NAME: 'own',
        OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-attributes',
      }).spans?.serviceName,
      'own',
    )
    const sampled = parseConfig({
      ...base,
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
    }).spans
    assert.equal(sampled?.sampler, 'parentbased_traceidratio')
    assert.equal(sampled?.ratio, 0.25)
    assert.equal(parseConfig(base).spans?.ratio, 1)
    assert.deepEqual(
      parseConfig({ ...base, OTEL_EXPORTER_OTLP_HEADERS: 'api-key=a%3Db, x = y ' }).spans?.headers,
      { 'api-key': 'a=b', x: 'y' },
    )
    // No spans: no endpoint, the SDK disabled, or no exporter.
    assert.equal(parseConfig({}).spans, undefined)
    assert.equal(parseConfig({ ...base, OTEL_SDK_DISABLED: 'TRUE' }).spans, undefined)
    assert.equal(parseConfig({ ...base, OTEL_TRACES_EXPORTER: 'none' }).spans, undefined)
  })

  test('spans need the trace context, and an export batch fits the queue: either refused naming the variable; headers are never echoed', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }
    assert.throws(
      () => parseConfig({ ...base, TRACE_CONTEXT: 'off' }),
      (err: Error) => err instanceof ConfigError && /TRACE_CONTEXT/.test(err.message),
    )
    assert.equal(parseConfig({ TRACE_CONTEXT: 'off' }).spans, undefined)
    assert.throws(
      () => parseConfig({ ...base, OTEL_BSP_MAX_QUEUE_SIZE: '100' }),
      (err: Error) =>
        err instanceof ConfigError && /OTEL_BSP_MAX_EXPORT_BATCH_SIZE/.test(err.message),
    )
    assert.throws(
      () => parseConfig({ ...base, OTEL_EXPORTER_OTLP_HEADERS: 's3cret' }),
      (err: Error) =>
        err instanceof ConfigError &&
        /OTEL_EXPORTER_OTLP_HEADERS/.test(err.message) &&
        !err.message.includes('s3cret'),
    )
  })

  test('HOST and METRICS_HOST take IP addresses and host names', () => {
    for (const host of ['0.0.0.0', '127.0.0.1', '::', '::1', 'localhost', 'plants-1.internal'])
      assert.equal(parseConfig({ HOST: host, METRICS_HOST: host }).host, host)
  })

  test('an invalid HOST stops npm start before anything else, with one line on standard error naming HOST', async () => {
    // No DATABASE_URL: had it gone further, it would have started the embedded database.
    const { code, stdout, stderr } = await runMain([], { HOST: '999.999.1.1', PORT: '0' })
    assert.equal(code, 1)
    assert.equal(stdout, '')
    assert.deepEqual(stderr.trim().split('\n'), [
      'plant-store: invalid setting HOST="999.999.1.1": must be a host name or an IP address',
    ])
  })

  test('the service stops at start with one clear line naming the variable and exit status 1', async () => {
    const { code, stdout, stderr } = await runMain([], { PORT: 'abc' })
    assert.equal(code, 1)
    assert.equal(stdout, '')
    const lines = stderr.trim().split('\n')
    assert.equal(lines.length, 1, stderr)
    assert.match(lines[0] ?? '', /PORT="abc": must be an integer from 0 to 65535/)
  })
})

describe('a database URL, read once', () => {
  const listed =
    'postgres://app:s%40cret@db1:5432,db2:6432/plants?sslmode=verify-full&sslrootcert=/ca.pem&target_session_attrs=read-write&application_name=x'

  test('its hosts, each a one-host URL without target_session_attrs; its parameters; whether it asks for a writable server', () => {
    const url = readDatabaseUrl(listed)
    assert.deepEqual(
      url.hosts.map((h) => h.host),
      ['db1:5432', 'db2:6432'],
    )
    assert.ok(url.hosts.every((h) => !h.searchParams.has('target_session_attrs')))
    assert.equal(url.query.get('sslmode'), 'verify-full')
    assert.equal(url.wantsWritable, true)
    assert.equal(readDatabaseUrl('postgres://db/plants').wantsWritable, false)
  })

  test('the driver gets the first host, no TLS parameter, and one writability check: its own (read-write as primary) or none where the connector checks', () => {
    const url = readDatabaseUrl(listed)
    assert.equal(driverUrl(url, true), 'postgres://app:s%40cret@db1:5432/plants?application_name=x')
    assert.equal(
      driverUrl(url, false),
      'postgres://app:s%40cret@db1:5432/plants?target_session_attrs=primary&application_name=x',
    )
    assert.equal(driverUrl(readDatabaseUrl('postgres://db/plants'), false), 'postgres://db/plants')
  })

  test('the connector checks writability itself for several hosts asking for it, and only then', () => {
    const plain = 'postgres://app@db1:5432,db2:6432/plants?target_session_attrs=read-write'
    assert.equal(hostConnector(plain).checksWritable, true)
    assert.equal(hostConnector(plain.replace('db1:5432,', '')).checksWritable, false)
    assert.equal(hostConnector('postgres://db1,db2/plants').checksWritable, false)
    assert.equal(
      hostConnector('postgres://db1/plants', () => 'postgres://db2/plants').checksWritable,
      true,
    )
  })
})
