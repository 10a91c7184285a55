import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer, uniqueId } from './helpers/server.ts'

const s = await startTestServer({ after })
const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** Sends a create with the given traceparent; returns the response's trace and the log line. */
async function send(traceparent?: string, requestId = `trace-${uniqueId()}`) {
  const headers: Record<string, string> = { 'x-request-id': requestId }
  if (traceparent !== undefined) headers.traceparent = traceparent
  const res = await s.post({ id: uniqueId(), name: 'traced' }, { headers })
  assert.equal(res.status, 200)
  const header = res.headers.get('traceparent') ?? ''
  const match = traceparentPattern.exec(header)
  assert.ok(match, `the response's traceparent ${header}`)
  const line = s.logs.find((l) => l.message === 'request' && l.requestId === requestId)
  assert.ok(line, 'the request was logged')
  assert.equal(res.headers.get('x-request-id'), requestId, 'X-Request-Id stays as it is')
  const [, traceId = '', spanId = '', flags = ''] = match
  return { traceId, spanId, flags, line }
}

describe('W3C trace context (traceparent)', () => {
  test('a valid traceparent is kept: same trace id, a new span id for the request, the caller as parent, in the response and the log line', async () => {
    const given = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
    const { traceId, spanId, flags, line } = await send(given)
    assert.equal(traceId, '4bf92f3577b34da6a3ce929d0e0e4736')
    assert.notEqual(spanId, '00f067aa0ba902b7')
    assert.equal(flags, '01', 'the sampled flag is passed on')
    assert.equal(line.traceId, traceId)
    assert.equal(line.spanId, spanId)
    assert.equal(line.parentSpanId, '00f067aa0ba902b7')
  })

  test('a later version with more fields is read by its first four', async () => {
    const { traceId } = await send(
      'cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes-next',
    )
    assert.equal(traceId, '4bf92f3577b34da6a3ce929d0e0e4736')
  })

  test('a missing or invalid traceparent gets a fresh trace id', async () => {
    const invalid = [
      undefined,
      '',
      'garbage',
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', // version ff
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01', // zero trace id
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01', // zero parent id
      '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01', // upper case
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra', // extra field in 00
      '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01', // short trace id
    ]
    const seen = new Set<string>()
    for (const traceparent of invalid) {
      const { traceId, spanId, line } = await send(traceparent)
      assert.notEqual(traceId, '4bf92f3577b34da6a3ce929d0e0e4736', String(traceparent))
      assert.notEqual(traceId, '0'.repeat(32))
      assert.equal(line.traceId, traceId)
      assert.equal(line.spanId, spanId)
      assert.equal(line.parentSpanId, undefined)
      seen.add(traceId)
    }
    assert.equal(seen.size, invalid.length, 'each request its own trace')
  })

  test('every response carries one, errors and other paths too', async () => {
    for (const res of [
      await fetch(`${s.base}/nowhere`),
      await fetch(`${s.base}/healthz`),
      await s.post('{'),
    ]) {
      await res.arrayBuffer()
      assert.match(res.headers.get('traceparent') ?? '', traceparentPattern)
    }
  })

  test('TRACE_CONTEXT=off: no traceparent and no trace ids in the log', async () => {
    const off = await startTestServer({ after }, { env: { TRACE_CONTEXT: 'off' } })
    const res = await off.post(
      { id: uniqueId(), name: 'untraced' },
      { headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } },
    )
    assert.equal(res.status, 200)
    assert.equal(res.headers.get('traceparent'), null)
    const line = off.logs.find((l) => l.message === 'request')
    assert.ok(line && !('traceId' in line) && !('spanId' in line))
  })
})
