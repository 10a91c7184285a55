import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer, uniqueId } from './helpers/server.ts'

const s = await startTestServer({ after })

function lineOf(requestId: string): Record<string, unknown> | undefined {
  return s.logs.find((l) => l.message === 'request' && l.requestId === requestId)
}

describe('one JSON log line per request', () => {
  test('a create is logged with time, level, request id, method, path, status, duration and token name', async () => {
    const requestId = `log-${uniqueId()}`
    const res = await s.post(
      { id: uniqueId(), name: 'logged' },
      { headers: { 'x-request-id': requestId } },
    )
    assert.equal(res.status, 200)
    const line = lineOf(requestId)
    assert.ok(line, 'no log line')
    assert.equal(line.level, 'info')
    assert.match(String(line.time), /^\d{4}-\d\d-\d\dT/)
    assert.deepEqual([line.method, line.path, line.status], ['POST', '/plants', 200])
    assert.equal(typeof line.durationMs, 'number')
    assert.match(String(line.tokenName), /^test-/)
    assert.equal(line.error, undefined)
  })

  test('a refused request is logged with its error code and without a token name', async () => {
    const requestId = `log-${uniqueId()}`
    await s.post(
      { id: uniqueId(), name: 'x' },
      { token: 'pst_nope', headers: { 'x-request-id': requestId } },
    )
    const line = lineOf(requestId)
    assert.deepEqual([line?.status, line?.error, line?.tokenName], [401, 40102, undefined])
  })

  test('the log holds no token, only token names', async () => {
    await s.post({ id: uniqueId(), name: 'x' })
    assert.ok(!JSON.stringify(s.logs).includes(s.token))
  })
})
