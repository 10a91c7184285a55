import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from '../../test/helpers/pgbouncer.ts'
import { type Bench, type Comparison, say } from '../bench.ts'
import { spawnService } from '../processes.ts'

// Phases that run two services side by side through the bench's compare().

/** Metrics and trace context on (the default) against off. */
export async function observabilityPhase(bench: Bench): Promise<Comparison> {
  return bench.compare(
    'metrics and trace context at 64 connections: on (the default) against off',
    ['on', 'off'],
    [
      await spawnService('on', bench.url),
      await spawnService('off', bench.url, { METRICS: 'off', TRACE_CONTEXT: 'off' }),
    ],
  )
}

/**
 * Spans over OTLP/HTTP to a receiver in this process that takes every export, against no
 * endpoint (the SDK not loaded): every request sampled (wrk sends no traceparent, and the default
 * sampler records every new trace), then a tenth of them (parentbased_traceidratio, 0.1). The
 * receiver counts what it took.
 */
export async function spansPhase(bench: Bench): Promise<{
  all: Comparison & { exports: number; bytes: number }
  tenth: Comparison & { exports: number; bytes: number }
}> {
  let exports = 0
  let bytes = 0
  const receiver = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => {
      bytes += chunk.length
    })
    req.on('end', () => {
      exports++
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
    })
  })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  const { port } = receiver.address() as AddressInfo
  const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` }
  const run = async (what: string, settings: Record<string, string>) => {
    exports = 0
    bytes = 0
    const comparison = await bench.compare(
      `spans over OTLP/HTTP (http/protobuf, ${what}) at 64 connections: on against off (no endpoint)`,
      ['spans', 'off'],
      [
        await spawnService('spans', bench.url, { ...endpoint, ...settings }),
        await spawnService('off', bench.url),
      ],
    )
    say(`spans (${what}): the receiver took ${exports} exports, ${(bytes / 1e6).toFixed(1)} MB`)
    return { ...comparison, exports, bytes }
  }
  try {
    return {
      all: await run('every request sampled', {}),
      tenth: await run('a tenth sampled', {
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.1',
      }),
    }
  } finally {
    receiver.close()
  }
}

/**
 * WORKERS=2 with each worker accepting its own connections (SCHED_NONE, the service's choice)
 * against Node's round robin through the primary (NODE_CLUSTER_SCHED_POLICY=rr).
 */
export async function schedulingPhase(bench: Bench): Promise<Comparison> {
  return bench.compare(
    'WORKERS=2 at 64 connections: workers accept (SCHED_NONE, the default) against round robin (NODE_CLUSTER_SCHED_POLICY=rr)',
    ['none', 'rr'],
    [
      await spawnService('none', bench.url, { WORKERS: '2' }),
      await spawnService('rr', bench.url, { WORKERS: '2', NODE_CLUSTER_SCHED_POLICY: 'rr' }),
    ],
  )
}

/** Through PgBouncer in transaction mode (pool of 8) against straight to PostgreSQL. */
export async function pgbouncerPhase(bench: Bench): Promise<Comparison | string> {
  const { url, sql } = bench
  if (!pgbouncerPresent) {
    const why = `no PgBouncer at ${pgbouncerPath} (apt-get install pgbouncer)`
    say('')
    say(`pgbouncer: left out, ${why}`)
    return why
  }
  const cleanups: (() => unknown)[] = []
  try {
    const bouncer = await startPgBouncer(
      url,
      { after: (fn) => void cleanups.push(fn) },
      { poolSize: 8 },
    )
    // Through the pooler the service sends no statement_timeout; the database carries it.
    await sql.unsafe(
      `alter database ${new URL(url).pathname.slice(1)} set statement_timeout = '5s'`,
    )
    return await bench.compare(
      'through PgBouncer 1.18 in transaction mode (pool of 8) against straight to PostgreSQL, 64 connections',
      ['pgbouncer', 'direct'],
      [
        await spawnService('pgbouncer', bouncer.url, {
          DATABASE_POOL_MODE: 'transaction',
          DATABASE_DIRECT_URL: url,
        }),
        await spawnService('direct', url),
      ],
    )
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup()
  }
}

/**
 * This checkout's service against another checkout's (`--baseline DIR`, with its own
 * node_modules), on the same database: a change's cost, measured side by side.
 */
export async function baselinePhase(bench: Bench, dir: string): Promise<Comparison> {
  return bench.compare(
    `this checkout against the one in ${dir}, 64 connections`,
    ['this', 'baseline'],
    [
      await spawnService('this', bench.url),
      await spawnService('baseline', bench.url, {}, { cwd: dir }),
    ],
  )
}
