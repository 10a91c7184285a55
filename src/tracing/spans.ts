import type { SpanSettings } from '../config.ts'
import { hostUrls } from '../db/reach/url.ts'
import type { Trace } from '../http/trace-context.ts'
import type { Log } from '../log.ts'
import { serviceVersion } from '../version.ts'

/**
 * Spans exported over OTLP (`tracing/otel.ts`, loaded only when an endpoint is set): what the
 * HTTP adapter and the statement slots call. This module loads nothing of OpenTelemetry.
 */
export type Spans = {
  /**
   * Starts the span of a request, continuing the caller's `traceparent` when it is valid. Its
   * `trace` (the span's own ids, and whether it is sampled) goes into the answer's `traceparent`
   * and the log line.
   */
  readonly request: (traceparent: string | string[] | undefined, facts: RequestFacts) => RequestSpan
  /**
   * Starts the span of one insert statement, linked to each sampled request among `requests`
   * (the requests whose creates it carries) and a child of the first of them; `undefined` when
   * none is sampled, so a statement whose requests are all sampled out exports nothing.
   */
  readonly statement: (
    requests: readonly (Trace | undefined)[],
    facts: StatementFacts,
  ) => StatementSpan | undefined
  /** Sends what is still waiting, for at most `ms`, and stops. */
  readonly shutdown: (ms: number) => Promise<void>
}

/** What a request's span says of it before it is answered. */
export type RequestFacts = {
  readonly method: string
  /** The path without its query. */
  readonly path: string
  readonly client: string | undefined
  readonly userAgent: string | undefined
  readonly httpVersion: string
  readonly serverPort: number | undefined
}

/** A request's span, open until its answer is written. */
export type RequestSpan = {
  readonly trace: Trace
  /** `route` is the matched pattern (`unmatched` for none); `errorCode` the contract's code. */
  readonly end: (status: number, route: string, errorCode: number | undefined) => void
}

/** Where a statement runs, and what it carries. */
export type StatementFacts = {
  readonly rows: number
  /** The statement slot (a connection of its own) it runs on. */
  readonly slot: number
  readonly database: DatabaseFacts
}

/** The database a batching writes to, as the semantic conventions name it. */
export type DatabaseFacts = {
  readonly namespace: string
  /** `undefined` when the URL lists several hosts (the one connected to is not known here). */
  readonly address: string | undefined
  readonly port: number | undefined
}

/** A statement's span, open until its outcome is known. */
export type StatementSpan = {
  /** `error` is what the statement failed with, if it did (a batch is one transaction). */
  readonly end: (error?: unknown) => void
}

/** Spans handed to the exporter and spans dropped since start, by why (for the metrics). */
export const spanCounts = {
  exported: 0,
  /** Finished while `OTEL_BSP_MAX_QUEUE_SIZE` spans waited: never queued. */
  queueFull: 0,
  /** In an export that failed or timed out (the collector unreachable, say). */
  exportFailed: 0,
}

/**
 * The database facts of `url` (its first host's database; its host when it lists one), or of
 * the Citus node `host:port` a batching of another group goes to.
 */
export function databaseFacts(url: string, node?: string): DatabaseFacts {
  const hosts = hostUrls(url) ?? []
  const first = hosts[0]
  const namespace = decodeURIComponent(first?.pathname.slice(1) ?? '') || 'postgres'
  if (node !== undefined) {
    const at = node.lastIndexOf(':')
    return at > 0
      ? { namespace, address: node.slice(0, at), port: Number(node.slice(at + 1)) }
      : { namespace, address: node, port: 5432 }
  }
  if (first === undefined || hosts.length > 1)
    return { namespace, address: undefined, port: undefined }
  return {
    namespace,
    address: first.hostname.replace(/^\[|\]$/g, ''),
    port: Number(first.port || '5432'),
  }
}

/**
 * The spans of `settings` (the `OTEL_*` variables), or `undefined` when none are exported: then
 * nothing of OpenTelemetry is ever loaded.
 */
export async function startSpans(
  settings: SpanSettings | undefined,
  log: Log,
): Promise<Spans | undefined> {
  if (settings === undefined) return undefined
  const { openSpans } = await import('./otel.ts')
  const spans = await openSpans(settings, log, serviceVersion)
  log.info('spans exported over OTLP', {
    url: settings.url,
    protocol: settings.protocol,
    sampler: settings.sampler,
    ...(settings.sampler.endsWith('traceidratio') && { ratio: settings.ratio }),
    serviceName: settings.serviceName,
  })
  return spans
}
