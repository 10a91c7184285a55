import assert from 'node:assert/strict'
import type { Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { openSocket, readUntilClosed } from '../helpers/raw-http.ts'
import { startTestServer, uniqueId } from '../helpers/server.ts'

const s = await startTestServer({ after })

describe('slow and greedy clients', { concurrency: true }, () => {
  test('request headers that trickle in are cut off after 10 s', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.write('POST /plants HTTP/1.1\r\nHost: x\r\n')
    const drip = setInterval(() => socket.writable && socket.write('X-Slow: a\r\n'), 1000)
    const res = await closed
    clearInterval(drip)
    assert.ok(res.elapsedMs >= 9_500 && res.elapsedMs < 12_500, `cut after ${res.elapsedMs} ms`)
    assert.equal(res.status, 408)
    assert.match(res.headers['x-request-id'] ?? '', /^[0-9a-f-]{36}$/)
  })

  test('request headers that stop arriving get 408 with X-Request-Id after 10 s, then the close (README, Limits)', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.write('POST /plants HTTP/1.1\r\nHost: x\r\n')
    const res = await closed
    assert.ok(res.elapsedMs >= 9_500 && res.elapsedMs < 12_500, `cut after ${res.elapsedMs} ms`)
    assert.equal(res.status, 408)
    assert.equal(res.headers.connection, 'close')
    assert.match(res.headers['x-request-id'] ?? '', /^[0-9a-f-]{36}$/)
  })

  test('a body that stops arriving gets 408 with X-Request-Id, then the close, and nothing is stored', async () => {
    const id = uniqueId()
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    const body = JSON.stringify({ id, name: 'stalled' })
    socket.write(
      `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`,
    )
    const res = await closed
    assert.ok(res.elapsedMs >= 9_500 && res.elapsedMs < 12_500, `cut after ${res.elapsedMs} ms`)
    assert.equal(res.status, 408)
    assert.equal(res.headers.connection, 'close')
    assert.match(res.headers['x-request-id'] ?? '', /^[0-9a-f-]{36}$/)
    assert.equal((await s.db.sql`select 1 from plants where id = ${id}`).length, 0)
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
    assert.equal(res.status, 408)
    assert.match(res.headers['x-request-id'] ?? '', /^[0-9a-f-]{36}$/)
  })

  test('an idle keep-alive connection advertises 5 s and is closed 6 s after the answer (README, Limits)', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
    const res = await closed
    assert.equal(res.status, 200)
    assert.equal(res.headers['keep-alive'], 'timeout=5')
    // Node closes a second after the advertised time; a busy machine may add a little.
    assert.ok(res.elapsedMs >= 5_900 && res.elapsedMs < 7_000, `closed after ${res.elapsedMs} ms`)
  })

  test('1,000 idle keep-alive connections do not stop normal requests', async () => {
    const idle: Socket[] = []
    after(() => {
      for (const socket of idle) socket.destroy()
    })
    for (let i = 0; i < 1000; i++) {
      const socket = await openSocket(s.base)
      socket.on('error', () => {})
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
      idle.push(socket)
    }
    const started = performance.now()
    const statuses = await Promise.all(
      Array.from(
        { length: 50 },
        async () => (await s.post({ id: uniqueId(), name: 'busy' })).status,
      ),
    )
    assert.deepEqual(statuses, Array(50).fill(200))
    assert.ok(performance.now() - started < 3000, `took ${performance.now() - started} ms`)
  })

  test('a body far over 16 KiB is refused after reading just past the limit, not read whole', async () => {
    const socket = await openSocket(s.base)
    const closed = readUntilClosed(socket)
    socket.on('error', () => {})
    socket.write(
      `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
    )
    // Offer 10 MiB in 64 KiB chunks, but only as fast as the socket takes them.
    const chunk = `${(65536).toString(16)}\r\n${'a'.repeat(65536)}\r\n`
    let sent = 0
    let open = true
    void closed.then(() => {
      open = false
    })
    while (open && sent < 10 * 1024 * 1024) {
      if (!socket.write(chunk)) await new Promise((r) => socket.once('drain', r).once('close', r))
      sent += 65536
    }
    const res = await closed
    assert.equal(res.status, 400)
    assert.equal(JSON.parse(res.body).error, 40003)
    assert.ok(sent < 10 * 1024 * 1024, `the client could send all ${sent} bytes`)
  })
})
