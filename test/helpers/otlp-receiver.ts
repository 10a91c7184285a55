import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gunzipSync } from 'node:zlib'

// A small OTLP/HTTP traces receiver for the tests: it takes what the OpenTelemetry SDK posts to
// /v1/traces, as protobuf (decoded here from the wire format and the field numbers of
// opentelemetry-proto's trace.proto, common.proto and resource.proto) or as JSON, and keeps
// each span in one plain shape.

/** A span as received: ids in lower-case hex, attributes as plain values. */
export type ReceivedSpan = {
  readonly traceId: string
  readonly spanId: string
  /** '' for a root span. */
  readonly parentSpanId: string
  readonly name: string
  /** 1 internal, 2 server, 3 client (trace.proto's SpanKind). */
  readonly kind: number
  readonly attributes: Readonly<Record<string, unknown>>
  readonly links: readonly { traceId: string; spanId: string }[]
  /** 0 unset, 1 ok, 2 error (trace.proto's Status.StatusCode). */
  readonly statusCode: number
  readonly resource: Readonly<Record<string, unknown>>
  readonly scope: string
}

/** One POST the receiver took: its content type and the spans in it. */
export type Export = { readonly contentType: string; readonly spans: readonly ReceivedSpan[] }

type Field = { readonly no: number; readonly wire: number; readonly value: bigint | Buffer }

/** The fields of a protobuf message, in order (varint, fixed64, length-delimited, fixed32). */
function fields(buf: Buffer): Field[] {
  const out: Field[] = []
  let at = 0
  const varint = (): bigint => {
    let result = 0n
    let shift = 0n
    for (;;) {
      const byte = buf[at++]
      if (byte === undefined) throw new Error('truncated varint')
      result |= BigInt(byte & 0x7f) << shift
      if ((byte & 0x80) === 0) return result
      shift += 7n
    }
  }
  while (at < buf.length) {
    const key = Number(varint())
    const no = key >>> 3
    const wire = key & 7
    if (wire === 0) out.push({ no, wire, value: varint() })
    else if (wire === 1) {
      out.push({ no, wire, value: buf.subarray(at, at + 8) })
      at += 8
    } else if (wire === 2) {
      const length = Number(varint())
      out.push({ no, wire, value: buf.subarray(at, at + length) })
      at += length
    } else if (wire === 5) {
      out.push({ no, wire, value: buf.subarray(at, at + 4) })
      at += 4
    } else throw new Error(`wire type ${wire} is not OTLP's`)
  }
  return out
}

const bytesOf = (f: Field[], no: number): Buffer[] =>
  f.filter((x) => x.no === no && Buffer.isBuffer(x.value)).map((x) => x.value as Buffer)
const first = (f: Field[], no: number): Buffer | undefined => bytesOf(f, no)[0]
const text = (f: Field[], no: number): string => first(f, no)?.toString('utf8') ?? ''
const hex = (f: Field[], no: number): string => first(f, no)?.toString('hex') ?? ''
const number = (f: Field[], no: number): number => {
  const v = f.find((x) => x.no === no && typeof x.value === 'bigint')?.value
  return v === undefined ? 0 : Number(v)
}

/** common.proto's AnyValue. */
function anyValue(buf: Buffer): unknown {
  const f = fields(buf)
  const [one] = f
  if (one === undefined) return undefined
  switch (one.no) {
    case 1:
      return (one.value as Buffer).toString('utf8')
    case 2:
      return one.value === 1n
    case 3:
      return Number(BigInt.asIntN(64, one.value as bigint))
    case 4:
      return (one.value as Buffer).readDoubleLE(0)
    case 5:
      return bytesOf(fields(one.value as Buffer), 1).map(anyValue)
    default:
      return one.value
  }
}

/** Repeated common.proto KeyValue as a record. */
function keyValues(f: Field[], no: number): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const kv of bytesOf(f, no)) {
    const k = fields(kv)
    const value = first(k, 2)
    out[text(k, 1)] = value === undefined ? undefined : anyValue(value)
  }
  return out
}

/** An ExportTraceServiceRequest in protobuf. */
function fromProtobuf(body: Buffer): ReceivedSpan[] {
  const spans: ReceivedSpan[] = []
  for (const rs of bytesOf(fields(body), 1)) {
    const r = fields(rs)
    const resourceBytes = first(r, 1)
    const resource = resourceBytes ? keyValues(fields(resourceBytes), 1) : {}
    for (const ss of bytesOf(r, 2)) {
      const s = fields(ss)
      const scopeBytes = first(s, 1)
      const scope = scopeBytes ? text(fields(scopeBytes), 1) : ''
      for (const sp of bytesOf(s, 2)) {
        const f = fields(sp)
        const statusBytes = first(f, 15)
        spans.push({
          traceId: hex(f, 1),
          spanId: hex(f, 2),
          parentSpanId: hex(f, 4),
          name: text(f, 5),
          kind: number(f, 6),
          attributes: keyValues(f, 9),
          links: bytesOf(f, 13).map((l) => {
            const lf = fields(l)
            return { traceId: hex(lf, 1), spanId: hex(lf, 2) }
          }),
          statusCode: statusBytes ? number(fields(statusBytes), 3) : 0,
          resource,
          scope,
        })
      }
    }
  }
  return spans
}

type JsonAnyValue = {
  stringValue?: string
  boolValue?: boolean
  intValue?: string | number
  doubleValue?: number
  arrayValue?: { values?: JsonAnyValue[] }
}
type JsonKeyValue = { key: string; value?: JsonAnyValue }

function jsonValue(v: JsonAnyValue | undefined): unknown {
  if (v === undefined) return undefined
  if (v.stringValue !== undefined) return v.stringValue
  if (v.boolValue !== undefined) return v.boolValue
  if (v.intValue !== undefined) return Number(v.intValue)
  if (v.doubleValue !== undefined) return v.doubleValue
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(jsonValue)
  return undefined
}
const jsonAttributes = (list: JsonKeyValue[] | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((kv) => [kv.key, jsonValue(kv.value)]))

/** An ExportTraceServiceRequest in OTLP's JSON (ids in hex, as the OTLP JSON mapping says). */
function fromJson(body: Buffer): ReceivedSpan[] {
  type JsonSpan = {
    traceId: string
    spanId: string
    parentSpanId?: string
    name: string
    kind: number
    attributes?: JsonKeyValue[]
    links?: { traceId: string; spanId: string }[]
    status?: { code?: number }
  }
  const request = JSON.parse(body.toString('utf8')) as {
    resourceSpans?: {
      resource?: { attributes?: JsonKeyValue[] }
      scopeSpans?: { scope?: { name?: string }; spans?: JsonSpan[] }[]
    }[]
  }
  const spans: ReceivedSpan[] = []
  for (const rs of request.resourceSpans ?? []) {
    const resource = jsonAttributes(rs.resource?.attributes)
    for (const ss of rs.scopeSpans ?? [])
      for (const s of ss.spans ?? [])
        spans.push({
          traceId: s.traceId.toLowerCase(),
          spanId: s.spanId.toLowerCase(),
          parentSpanId: (s.parentSpanId ?? '').toLowerCase(),
          name: s.name,
          kind: s.kind,
          attributes: jsonAttributes(s.attributes),
          links: (s.links ?? []).map((l) => ({
            traceId: l.traceId.toLowerCase(),
            spanId: l.spanId.toLowerCase(),
          })),
          statusCode: s.status?.code ?? 0,
          resource,
          scope: ss.scope?.name ?? '',
        })
  }
  return spans
}

async function bodyOf(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  const body = Buffer.concat(chunks)
  return req.headers['content-encoding'] === 'gzip' ? gunzipSync(body) : body
}

/** A receiver on a port of its own, closed after `t`. */
export async function startOtlpReceiver(t: { after: (fn: () => unknown) => void }) {
  const exports: Export[] = []
  const headers: Record<string, string | string[] | undefined>[] = []
  const server = createServer(async (req, res) => {
    const body = await bodyOf(req)
    const contentType = req.headers['content-type'] ?? ''
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      res.writeHead(404).end()
      return
    }
    headers.push(req.headers)
    const spans = contentType.includes('json') ? fromJson(body) : fromProtobuf(body)
    exports.push({ contentType, spans })
    // An empty ExportTraceServiceResponse: all taken.
    if (contentType.includes('json')) {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    } else res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise((resolve) => server.close(resolve)))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    exports,
    headers,
    /** Every span received so far. */
    spans: (): ReceivedSpan[] => exports.flatMap((e) => e.spans),
  }
}
