import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createHttpServer } from '../src/http/server.ts'
import { reply } from '../src/http/types.ts'
import { createLog } from '../src/log.ts'
import { manualClock } from './helpers/clock.ts'
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

describe('the HTTP server on a clock of its own', () => {
  test("a request's deadlines count from its arrival on the server's clock, and its logged duration is that clock's", async () => {
    const { clock, advance } = manualClock(5000)
    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
    let receivedAt: number | undefined
    const server = createHttpServer({
      log,
      clock,
      route: () => ({
        pattern: '/slow',
        params: {},
        target: async (_req, ctx) => {
          receivedAt = ctx.receivedAt
          await advance(250)
          return reply({ ok: true })
        },
      }),
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    after(() => new Promise<void>((resolve) => server.close(() => resolve())))
    const { port } = server.address() as { port: number }
    const res = await fetch(`http://127.0.0.1:${port}/slow`)
    assert.equal(res.status, 200)
    assert.equal(receivedAt, 5000)
    const line = lines.find((l) => l.message === 'request')
    assert.equal(line?.durationMs, 250)
  })
})
