import { randomUUID } from 'node:crypto'
import {
  type Attributes,
  createNoopMeter,
  type Link,
  type Meter,
  type MeterProvider,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api'
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type Sampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace'
import type { SpanSettings } from '../config.ts'
import { type Trace, traceOf } from '../http/trace-context.ts'
import type { Log } from '../log.ts'
import {
  type RequestFacts,
  type RequestSpan,
  type Spans,
  type StatementFacts,
  type StatementSpan,
  spanCounts,
} from './spans.ts'

/** The sampler the OpenTelemetry specification names `name` (OTEL_TRACES_SAMPLER). */
function samplerOf(name: SpanSettings['sampler'], ratio: number): Sampler {
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler()
    case 'always_off':
      return new AlwaysOffSampler()
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(ratio)
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() })
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) })
  }
}

// The SDK counts the spans its processor has finished with in this counter of the semantic
// conventions, with `error.type` when they were dropped (`queue_full`) or their export failed.
const processedSpans = 'otel.sdk.processor.span.processed'

/**
 * A meter provider for the SDK's own metrics that keeps one of them: the spans exported and
 * dropped (`spanCounts`, read by `/metrics`). `processed` hears each count.
 */
function spanCountingMeters(
  processed: (count: number, errorType: string | undefined) => void,
): MeterProvider {
  const noop = createNoopMeter()
  const meter: Meter = Object.assign(Object.create(noop) as Meter, {
    createCounter(name: string, options?: Parameters<Meter['createCounter']>[1]) {
      if (name !== processedSpans) return noop.createCounter(name, options)
      // A counter of its own: the no-op meter's counters are one object shared by all.
      return {
        add: (count: number, attributes?: Attributes) =>
          processed(count, attributes?.['error.type'] as string | undefined),
      }
    },
  })
  return { getMeter: () => meter }
}

/**
 * Counts each span the batch processor is done with (`spans.ts`'s `spanCounts`): exported, or
 * dropped for a full queue or a failed export; one warning when spans begin to be dropped, one
 * line when they reach the collector again.
 */
function countProcessed(settings: SpanSettings, log: Log) {
  let droppedInEpisode = 0
  return (count: number, errorType: string | undefined) => {
    if (errorType === undefined) {
      spanCounts.exported += count
      if (droppedInEpisode > 0)
        log.info('spans reach the collector again', {
          endpoint: settings.url,
          droppedSpans: droppedInEpisode,
        })
      droppedInEpisode = 0
      return
    }
    if (errorType === 'queue_full') spanCounts.queueFull += count
    else spanCounts.exportFailed += count
    if (droppedInEpisode === 0)
      log.warn(
        'spans are being dropped: requests go on as before, and plant_store_spans_dropped_total counts what is lost',
        {
          reason: errorType,
          ...(errorType === 'queue_full'
            ? { queued: settings.batch.maxQueueSize }
            : { endpoint: settings.url }),
        },
      )
    droppedInEpisode += count
  }
}

/** A server span for a request, a child of the caller's `traceparent` when it is valid. */
function requestSpan(
  tracer: Tracer,
  traceparent: string | string[] | undefined,
  facts: RequestFacts,
): RequestSpan {
  const caller = traceOf(traceparent)
  const parent =
    caller.parentId === undefined
      ? ROOT_CONTEXT
      : trace.setSpanContext(ROOT_CONTEXT, {
          traceId: caller.traceId,
          spanId: caller.parentId,
          traceFlags: Number.parseInt(caller.flags, 16),
          isRemote: true,
        })
  const span = tracer.startSpan(facts.method, { kind: SpanKind.SERVER }, parent)
  // Attributes only for a span that is recorded: one sampled out costs an id and no more.
  if (span.isRecording()) {
    const attributes: Attributes = {
      'http.request.method': facts.method,
      'url.path': facts.path,
      'url.scheme': 'http',
      'network.protocol.version': facts.httpVersion,
    }
    if (facts.client !== undefined) attributes['client.address'] = facts.client
    if (facts.userAgent !== undefined) attributes['user_agent.original'] = facts.userAgent
    if (facts.serverPort !== undefined) attributes['server.port'] = facts.serverPort
    span.setAttributes(attributes)
  }
  const context = span.spanContext()
  const own: Trace = {
    traceId: context.traceId,
    parentId: caller.parentId,
    spanId: context.spanId,
    flags: context.traceFlags & 1 ? '01' : '00',
  }
  return {
    trace: own,
    end(status, route, errorCode) {
      if (!span.isRecording()) return
      if (route !== 'unmatched') {
        span.updateName(`${facts.method} ${route}`)
        span.setAttribute('http.route', route)
      }
      span.setAttribute('http.response.status_code', status)
      if (errorCode !== undefined) span.setAttribute('plant_store.error.code', errorCode)
      if (status >= 500) {
        span.setAttribute('error.type', String(status))
        span.setStatus({ code: SpanStatusCode.ERROR })
      }
      span.end()
    },
  }
}

/**
 * A client span for an insert statement, a child of the first sampled request it carries and
 * linked to every sampled one; none when no request of it is sampled.
 */
function statementSpan(
  tracer: Tracer,
  requests: readonly (Trace | undefined)[],
  { rows, slot, database }: StatementFacts,
): StatementSpan | undefined {
  let parent: Trace | undefined
  const links: Link[] = []
  for (const request of requests) {
    if (request === undefined || request.flags !== '01') continue
    parent ??= request
    links.push({
      context: { traceId: request.traceId, spanId: request.spanId, traceFlags: 1 },
    })
  }
  if (parent === undefined) return undefined
  const attributes: Attributes = {
    'db.system.name': 'postgresql',
    'db.namespace': database.namespace,
    'db.collection.name': 'plants',
    'db.operation.name': 'INSERT',
    'db.query.summary': 'INSERT plants',
    'db.operation.batch.size': rows,
    'plant_store.statement.slot': slot,
  }
  if (database.address !== undefined) attributes['server.address'] = database.address
  if (database.port !== undefined) attributes['server.port'] = database.port
  const span = tracer.startSpan(
    'INSERT plants',
    { kind: SpanKind.CLIENT, attributes, links },
    trace.setSpanContext(ROOT_CONTEXT, {
      traceId: parent.traceId,
      spanId: parent.spanId,
      traceFlags: 1,
    }),
  )
  return {
    end(error) {
      if (error !== undefined) {
        const code = (error as { code?: unknown }).code
        if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code))
          span.setAttribute('db.response.status_code', code)
        span.setAttribute(
          'error.type',
          typeof code === 'string' ? code : error instanceof Error ? error.name : 'unknown',
        )
        span.setStatus({ code: SpanStatusCode.ERROR })
      }
      span.end()
    },
  }
}

/**
 * Spans over OTLP/HTTP through the OpenTelemetry SDK: a batch span processor (a bounded queue,
 * sent every `OTEL_BSP_SCHEDULE_DELAY` ms) and the exporter of `settings.protocol`. A span that
 * finds the queue full, or whose export fails, is dropped and counted; nothing waits for the
 * collector. One warning when spans begin to be dropped, one line when they reach it again.
 */
export async function openSpans(
  settings: SpanSettings,
  log: Log,
  serviceVersion: string,
): Promise<Spans> {
  const { OTLPTraceExporter } =
    settings.protocol === 'http/json'
      ? await import('@opentelemetry/exporter-trace-otlp-http')
      : await import('@opentelemetry/exporter-trace-otlp-proto')
  type Compression = NonNullable<
    NonNullable<ConstructorParameters<typeof OTLPTraceExporter>[0]>['compression']
  >
  const exporter = new OTLPTraceExporter({
    url: settings.url,
    headers: { ...settings.headers },
    timeoutMillis: settings.timeoutMs,
    compression: settings.compression as Compression,
  })
  const processed = countProcessed(settings, log)
  const provider = new TracerProvider({
    sampler: samplerOf(settings.sampler, settings.ratio),
    resource: defaultResource().merge(
      resourceFromAttributes({
        'service.version': serviceVersion,
        'service.instance.id': randomUUID(),
        ...settings.resourceAttributes,
        'service.name': settings.serviceName,
      }),
    ),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter,
        ...settings.batch,
        selfObsMeterProvider: spanCountingMeters(processed),
      }),
    ],
  })
  const tracer = provider.getTracer('plant-store', serviceVersion)

  return {
    request: (traceparent, facts) => requestSpan(tracer, traceparent, facts),

    statement: (requests, facts) => statementSpan(tracer, requests, facts),

    async shutdown(ms) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([
        provider.shutdown().catch(() => {}),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, ms)
        }),
      ])
      clearTimeout(timer)
    },
  }
}
