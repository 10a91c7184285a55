import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { openSocket, readUntilClosed } from './helpers/raw-http.ts'
import { startTestServer } from './helpers/server.ts'

const s = await startTestServer({ after })

describe('time limits', { concurrency: true }, () => {
  test('request headers that trickle in are cut off after 10 s', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.write('POST /plants HTTP/1.1\r\nHost: x\r\n')
    const drip = setInterval(() => socket.writable && socket.write('X-Slow: a\r\n'), 1000)
    const res = await closed
    clearInterval(drip)
    assert.ok(res.elapsedMs >= 9_500 && res.elapsedMs < 12_500, `cut after ${res.elapsedMs} ms`)
  })

  test('a whole request that takes over 30 s is cut off', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.write(
      `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"id":`,
    )
    const drip = setInterval(() => socket.writable && socket.write('1'), 2000)
    const res = await closed
    clearInterval(drip)
    assert.ok(res.elapsedMs >= 29_500 && res.elapsedMs < 32_500, `cut after ${res.elapsedMs} ms`)
  })

  test('an idle keep-alive connection is closed after 5 s', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
    const res = await closed
    assert.equal(res.status, 200)
    assert.ok(res.elapsedMs >= 4_500 && res.elapsedMs < 7_000, `closed after ${res.elapsedMs} ms`)
  })
})
