import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import { register } from 'node:module'
import type { AddressInfo } from 'node:net'
import { after, describe, test } from 'node:test'
import { MessageChannel } from 'node:worker_threads'
import { holdPlantsLock, insertsRunning } from './helpers/database.ts'
import { type ReceivedSpan, startOtlpReceiver } from './helpers/otlp-receiver.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

// Spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT), checked in what a receiver gets from the
// OpenTelemetry SDK: the request spans, their parents, the statement spans and their links, the
// resource, sampling; and that a collector that does not answer costs the requests nothing.

const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/
// Every module this process resolves from here on, told by hooks of node:module.
const resolved: string[] = []
const { port1, port2 } = new MessageChannel()
port1.on('message', (url: string) => resolved.push(url))
port1.unref()
register('./helpers/module-hooks.mjs', import.meta.url, {
  data: { port: port2 },
  transferList: [port2],
})
const sdkLoaded = () =>
  resolved.some((p) => p.includes('@opentelemetry/sdk-trace') || p.includes('exporter-trace-otlp'))

/** A random W3C trace context of a caller, sampled or not. */
function callerContext(sampled: boolean) {
  const traceId = Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString('hex')
  const parentId = Buffer.from(crypto.getRandomValues(new Uint8Array(8))).toString('hex')
  return { traceId, parentId, header: `00-${traceId}-${parentId}-${sampled ? '01' : '00'}` }
}

type Sent = { traceId: string; parentId: string; spanId: string; flags: string; status: number }

async function create(
  s: Awaited<ReturnType<typeof startTestServer>>,
  sampled: boolean,
  body: unknown = { id: uniqueId(), name: 'traced' },
  token?: string,
): Promise<Sent> {
  const caller = callerContext(sampled)
  const res = await s.post(body, {
    headers: { traceparent: caller.header },
    ...(token && { token }),
  })
  await res.arrayBuffer()
  const m = traceparentPattern.exec(res.headers.get('traceparent') ?? '')
  assert.ok(m, 'the answer carries a traceparent')
  return {
    traceId: m[1] ?? '',
    parentId: caller.parentId,
    spanId: m[2] ?? '',
    flags: m[3] ?? '',
    status: res.status,
  }
}

const findSpan = (spans: ReceivedSpan[], spanId: string) => spans.find((x) => x.spanId === spanId)

describe('spans over OTLP/HTTP', () => {
  test('with no OTLP endpoint set the OpenTelemetry SDK is never loaded, and creates answer as before', async () => {
    const s = await startTestServer({ after })
    const sent = await create(s, true)
    await import('../src/version.ts')
    // What a resolve hook hears reaches this thread a turn or two later.
    const heard = () => resolved.some((p) => p.includes('/src/version.ts'))
    await within(2000, heard).catch(() => undefined)
    assert.ok(heard(), 'the hooks hear the imports')
    assert.equal(sent.status, 200)
    assert.equal(sent.flags, '01', "the caller's flags are passed on as before")
    assert.equal(sdkLoaded(), false, 'no module of the SDK or an exporter was loaded')
    await s.close()
  })

  test('http/protobuf: a server span per request continues the caller’s trace; a span per insert statement is linked to every sampled request it carried; the resource says who sent them', async () => {
    const receiver = await startOtlpReceiver({ after })
    const s = await startTestServer(
      { after },
      {
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          OTEL_BSP_SCHEDULE_DELAY: '50',
          OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=test, team=plants%2Cgreen',
        },
      },
    )
    await within(2000, () => sdkLoaded()).catch(() => undefined)
    assert.equal(sdkLoaded(), true, 'with an endpoint, the SDK is loaded')
    // Both statement slots wait on a lock while the rest of the creates queue behind them, so
    // that the next statement carries several: sent together, they share it whatever the timing.
    const release = await holdPlantsLock(s.db.sql)
    const sending = Promise.all(Array.from({ length: 40 }, () => create(s, true)))
    try {
      await within(5000, async () => (await insertsRunning(s.db.sql, 'Lock')) >= 2)
      await within(5000, () => s.store.load().queued >= 2)
    } finally {
      await release()
    }
    const sampled = await sending
    const refused = await create(s, true, { name: '' })
    const unauthenticated = await create(s, true, { id: uniqueId(), name: 'x' }, 'not-a-token')
    const ids = [...sampled, refused, unauthenticated].map((x) => x.spanId)
    await within(10_000, async () => ids.every((id) => findSpan(receiver.spans(), id)))
    const spans = receiver.spans()
    assert.ok(receiver.exports.every((e) => e.contentType === 'application/x-protobuf'))

    for (const sent of sampled) {
      assert.equal(sent.status, 200)
      assert.equal(sent.flags, '01')
      const span = findSpan(spans, sent.spanId)
      assert.ok(span)
      assert.equal(span.traceId, sent.traceId, "the caller's trace")
      assert.equal(span.parentSpanId, sent.parentId, "the caller's span is its parent")
      assert.equal(span.name, 'POST /plants')
      assert.equal(span.kind, 2, 'a server span')
      assert.equal(span.attributes['http.request.method'], 'POST')
      assert.equal(span.attributes['http.route'], '/plants')
      assert.equal(span.attributes['url.path'], '/plants')
      assert.equal(span.attributes['http.response.status_code'], 200)
      assert.equal(span.statusCode, 0)
      assert.equal(span.scope, 'plant-store')
    }
    const refusedSpan = findSpan(spans, refused.spanId)
    assert.equal(refusedSpan?.attributes['http.response.status_code'], 400)
    assert.equal(refusedSpan?.attributes['plant_store.error.code'], 40005)
    assert.equal(
      findSpan(spans, unauthenticated.spanId)?.attributes['plant_store.error.code'],
      40102,
    )

    // Each statement: a client span in the trace of the first request it carried, linked to
    // each of them; each create is carried by exactly one statement here (nothing failed).
    const statements = spans.filter((x) => x.name === 'INSERT plants')
    assert.ok(statements.length >= 1)
    const carried = new Map<string, number>()
    for (const st of statements) {
      assert.equal(st.kind, 3, 'a client span')
      assert.equal(st.attributes['db.system.name'], 'postgresql')
      assert.equal(st.attributes['db.operation.name'], 'INSERT')
      assert.equal(st.attributes['db.collection.name'], 'plants')
      assert.equal(st.attributes['server.address'], '127.0.0.1')
      assert.equal(typeof st.attributes['db.namespace'], 'string')
      assert.equal(st.attributes['db.operation.batch.size'], st.links.length)
      const parent = st.links[0]
      assert.ok(parent)
      assert.equal(st.traceId, parent.traceId)
      assert.equal(st.parentSpanId, parent.spanId)
      for (const link of st.links) carried.set(link.spanId, (carried.get(link.spanId) ?? 0) + 1)
    }
    for (const sent of sampled)
      assert.equal(carried.get(sent.spanId), 1, `the create of span ${sent.spanId}`)
    assert.ok(
      statements.some((st) => st.links.length > 1),
      'creates sent together share one statement, linked to each',
    )

    const resource = spans[0]?.resource ?? {}
    assert.equal(resource['service.name'], 'plant-store')
    assert.equal(resource['deployment.environment.name'], 'test')
    assert.equal(resource.team, 'plants,green', 'values are percent-decoded')
    assert.equal(resource['telemetry.sdk.language'], 'nodejs')
    assert.equal(typeof resource['service.version'], 'string')
    assert.equal(typeof resource['service.instance.id'], 'string')
  })

  test('a sampled-out trace exports nothing: neither its request span nor a link to it; the answer says it is not sampled', async () => {
    const receiver = await startOtlpReceiver({ after })
    const s = await startTestServer(
      { after },
      {
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '50' },
      },
    )
    const out: Sent[] = []
    const into: Sent[] = []
    for (let round = 0; round < 5; round++) {
      const both = await Promise.all([
        ...Array.from({ length: 5 }, () => create(s, false)),
        ...Array.from({ length: 5 }, () => create(s, true)),
      ])
      out.push(...both.slice(0, 5))
      into.push(...both.slice(5))
    }
    // What was sampled arrives; what was not, finished before it, never does.
    await within(10_000, async () => into.every((x) => findSpan(receiver.spans(), x.spanId)))
    const spans = receiver.spans()
    for (const x of out) {
      assert.equal(x.status, 200)
      assert.equal(x.flags, '00', 'the answer says the trace is not sampled')
      assert.equal(
        spans.some((sp) => sp.traceId === x.traceId),
        false,
        'no span of the trace',
      )
      assert.equal(
        spans.some((sp) => sp.links.some((l) => l.spanId === x.spanId)),
        false,
        'no link to it',
      )
    }

    // OTEL_TRACES_SAMPLER=always_off: a sampled caller is not recorded either.
    const offReceiver = await startOtlpReceiver({ after })
    const off = await startTestServer(
      { after },
      {
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: offReceiver.url,
          OTEL_BSP_SCHEDULE_DELAY: '50',
          OTEL_TRACES_SAMPLER: 'always_off',
        },
      },
    )
    const offSent = await Promise.all(Array.from({ length: 10 }, () => create(off, true)))
    assert.ok(offSent.every((x) => x.status === 200 && x.flags === '00'))
    await off.close()
    assert.equal(offReceiver.spans().length, 0, 'nothing exported, at the stop either')
  })

  test('http/json with OTEL_SERVICE_NAME and headers: the same spans as JSON, with the headers, under that name; the last spans are sent at the stop', async () => {
    const receiver = await startOtlpReceiver({ after })
    const s = await startTestServer(
      { after },
      {
        env: {
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9/never',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=s3cret%3D',
          OTEL_SERVICE_NAME: 'plants-eu',
          OTEL_RESOURCE_ATTRIBUTES: 'service.name=overruled',
          // Nothing is sent before the stop.
          OTEL_BSP_SCHEDULE_DELAY: '600000',
        },
      },
    )
    const sent = await Promise.all(Array.from({ length: 5 }, () => create(s, true)))
    assert.equal(receiver.spans().length, 0)
    await s.close()
    const spans = receiver.spans()
    for (const x of sent) {
      const span = findSpan(spans, x.spanId)
      assert.ok(span, 'sent at the stop')
      assert.equal(span.parentSpanId, x.parentId)
      assert.equal(span.attributes['http.response.status_code'], 200)
    }
    assert.ok(spans.some((sp) => sp.name === 'INSERT plants' && sp.links.length >= 1))
    assert.ok(receiver.exports.every((e) => e.contentType.startsWith('application/json')))
    assert.equal(spans[0]?.resource['service.name'], 'plants-eu')
    assert.equal(receiver.headers[0]?.['x-api-key'], 's3cret=')
    const logged = JSON.stringify(s.logs)
    assert.equal(logged.includes('s3cret'), false, 'the header is never logged')
  })

  test('a collector that takes connections and never answers slows and fails no request: spans are dropped from a bounded queue and counted, with one warning', async () => {
    const held: import('node:net').Socket[] = []
    const silent: Server = createServer()
    silent.on('connection', (socket) => held.push(socket))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    after(() => {
      for (const socket of held) socket.destroy()
      silent.close()
    })
    const { port } = silent.address() as AddressInfo
    const s = await startTestServer(
      { after },
      {
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
          OTEL_BSP_SCHEDULE_DELAY: '10',
          OTEL_BSP_MAX_QUEUE_SIZE: '8',
          OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4',
          OTEL_EXPORTER_OTLP_TIMEOUT: '60000',
        },
      },
    )
    const times: number[] = []
    for (let round = 0; round < 20; round++) {
      const started = performance.now()
      const sent = await Promise.all(Array.from({ length: 10 }, () => create(s, true)))
      times.push(performance.now() - started)
      assert.ok(sent.every((x) => x.status === 200))
    }
    times.sort((a, b) => a - b)
    // Ten creates at once take a statement or two; a request that waited for the collector
    // would take its 60-s time-out.
    assert.ok((times.at(-1) ?? 0) < 2_000, `slowest round of 10 creates: ${times.at(-1)} ms`)
    const metrics = await (await fetch(`${s.base}/metrics`)).text()
    const dropped = Number(
      /plant_store_spans_dropped_total\{reason="queue_full"\} (\d+)/.exec(metrics)?.[1],
    )
    // 200 request spans (and the statements'), of which the queue (8) and the export that
    // hangs (4) hold 12 at most: the rest is dropped.
    assert.ok(dropped >= 200 - 12, `spans dropped for a full queue: ${dropped}`)
    const warnings = s.logs.filter(
      (l) => l.level === 'warn' && String(l.message).startsWith('spans are being dropped'),
    )
    assert.equal(warnings.length, 1, 'one warning for the episode')
  })

  test('a collector that refuses connections: the exports fail, their spans are dropped and counted as export_failed, and every create answers', async () => {
    const closed = createServer()
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
    const { port } = closed.address() as AddressInfo
    await new Promise((resolve) => closed.close(resolve))
    const s = await startTestServer(
      { after },
      {
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
          OTEL_BSP_SCHEDULE_DELAY: '10',
          OTEL_EXPORTER_OTLP_TIMEOUT: '300',
        },
      },
    )
    const sent = await Promise.all(Array.from({ length: 20 }, () => create(s, true)))
    assert.ok(sent.every((x) => x.status === 200))
    let failed = 0
    await within(10_000, async () => {
      const metrics = await (await fetch(`${s.base}/metrics`)).text()
      failed = Number(
        /plant_store_spans_dropped_total\{reason="export_failed"\} (\d+)/.exec(metrics)?.[1],
      )
      return failed >= 20
    })
    const warnings = s.logs.filter(
      (l) => l.level === 'warn' && String(l.message).startsWith('spans are being dropped'),
    )
    assert.equal(warnings.length, 1, 'one warning for the episode')
    assert.notEqual(warnings[0]?.reason, 'queue_full', "the export's error type")
    assert.match(String(warnings[0]?.endpoint), /^http:\/\/127\.0\.0\.1:\d+\/v1\/traces$/)
  })
})
