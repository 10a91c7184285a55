import { randomFillSync } from 'node:crypto'

// W3C Trace Context: version-traceid-parentid-flags. Version ff is invalid; version 00 has
// exactly these four fields; a later version may add fields after a dash.
const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-|$)/
const zeroTraceId = '0'.repeat(32)
const zeroSpanId = '0'.repeat(16)

/** A request's W3C trace context: its trace, the caller's span (if any) and its own span. */
export type Trace = { traceId: string; parentId: string | undefined; spanId: string; flags: string }

// Trace and span ids are hex from a pool of random bytes, refilled 4 KiB at a time: a tenth of
// the cost of a randomUUID per id.
const randomPool = Buffer.alloc(4096)
let randomOffset = randomPool.length
/** Hex of `bytes` random bytes, e.g. a trace or span id. */
export function randomHex(bytes: number): string {
  if (randomOffset + bytes > randomPool.length) {
    randomFillSync(randomPool)
    randomOffset = 0
  }
  randomOffset += bytes
  return randomPool.toString('hex', randomOffset - bytes, randomOffset)
}

/** The request's trace: the caller's trace id when its `traceparent` is valid, else a new one. */
export function traceOf(header: string | string[] | undefined): Trace {
  const spanId = randomHex(8)
  const m = typeof header === 'string' ? traceparentPattern.exec(header) : null
  if (
    m?.[2] !== undefined &&
    m[1] !== 'ff' &&
    !(m[1] === '00' && header?.length !== 55) &&
    m[2] !== zeroTraceId &&
    m[3] !== zeroSpanId
  ) {
    return { traceId: m[2], parentId: m[3], spanId, flags: m[4] ?? '00' }
  }
  return { traceId: randomHex(16), parentId: undefined, spanId, flags: '00' }
}
