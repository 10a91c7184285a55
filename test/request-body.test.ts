import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createRequest, exchange, openSocket, rawRequest } from './helpers/raw-http.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'

const s = await startTestServer({ after })

async function errorOf(res: Response): Promise<[number, number]> {
  const body = (await res.json()) as { error: number; message: string }
  assert.deepEqual(Object.keys(body).sort(), ['error', 'message'])
  return [res.status, body.error]
}

function raw(
  head: string,
  body: string | Uint8Array = '',
): Promise<import('./helpers/raw-http.ts').RawResponse> {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body
  return rawRequest(
    s.base,
    Buffer.concat([
      Buffer.from(
        `POST /plants HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${s.token}\r\n${head}\r\n`,
      ),
      bytes,
    ]),
  )
}

describe('the request body is checked: type, size, then JSON', () => {
  test('a missing body is 400/40001', async () => {
    const res = await raw('Content-Type: application/json\r\nContent-Length: 0\r\n')
    assert.equal(res.status, 400)
    assert.equal(JSON.parse(res.body).error, 40001)
  })

  test('an empty chunked body is 400/40001', async () => {
    const res = await raw(
      'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n',
      '0\r\n\r\n',
    )
    assert.equal(JSON.parse(res.body).error, 40001)
  })

  for (const type of [
    'text/plain',
    'application/json; charset=latin1',
    'application/jsonx',
    'application/json; foo=bar',
    'multipart/form-data',
  ]) {
    test(`Content-Type ${type} is 400/40002`, async () => {
      assert.deepEqual(
        await errorOf(
          await s.post({ id: uniqueId(), name: 'x' }, { headers: { 'content-type': type } }),
        ),
        [400, 40002],
      )
    })
  }

  test('a missing Content-Type is 400/40002', async () => {
    const res = await raw('Content-Length: 2\r\n', '{}')
    assert.equal(JSON.parse(res.body).error, 40002)
  })

  test('a Content-Encoding other than identity is 400/40002; identity is accepted', async () => {
    assert.deepEqual(
      await errorOf(
        await s.post({ id: uniqueId(), name: 'x' }, { headers: { 'content-encoding': 'gzip' } }),
      ),
      [400, 40002],
    )
    assert.equal(
      (await s.post({ id: uniqueId(), name: 'x' }, { headers: { 'content-encoding': 'identity' } }))
        .status,
      200,
    )
  })

  test('the content type is checked before the size and the JSON', async () => {
    const res = await raw('Content-Type: text/plain\r\nContent-Length: 99999\r\n')
    assert.equal(JSON.parse(res.body).error, 40002)
  })

  test('a declared Content-Length over 16 KiB is 400/40003 without the body being sent', async () => {
    // No body bytes follow: an answer proves the server did not wait for them.
    const res = await raw('Content-Type: application/json\r\nContent-Length: 16385\r\n')
    assert.equal(res.status, 400)
    assert.equal(JSON.parse(res.body).error, 40003)
    assert.equal(res.headers.connection, 'close')
  })

  test('a chunked body is cut off as soon as it passes 16 KiB: 400/40003', async () => {
    const chunk = 'a'.repeat(10_000)
    const chunked = `${(10_000).toString(16)}\r\n${chunk}\r\n`.repeat(2)
    // The final chunk is never sent: the answer comes from the size limit alone.
    const res = await raw(
      'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n',
      chunked,
    )
    assert.equal(JSON.parse(res.body).error, 40003)
  })

  test('a body of exactly 16 KiB is read', async () => {
    const id = uniqueId()
    const prefix = `{"id":${id},"name":"exact","pad":"`
    const body = `${prefix}${'p'.repeat(16 * 1024 - prefix.length - 2)}"}`
    assert.equal(Buffer.byteLength(body), 16 * 1024)
    assert.equal((await s.post(body)).status, 200)
  })

  for (const [label, body] of [
    ['truncated JSON', '{"id":1,"name":"x"'],
    ['a trailing comma', '{"id":1,"name":"x",}'],
    ['two values', '{"id":1} {"id":2}'],
    ['whitespace only', '   '],
    ['single quotes', "{'id':1}"],
  ] as const) {
    test(`${label} is 400/40004`, async () => {
      assert.deepEqual(await errorOf(await s.post(body)), [400, 40004])
    })
  }

  test('bytes that are not UTF-8 are 400/40004', async () => {
    const bytes = Buffer.concat([
      Buffer.from('{"id":1,"name":"'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('"}'),
    ])
    const res = await raw(
      `Content-Type: application/json\r\nContent-Length: ${bytes.length}\r\n`,
      bytes,
    )
    assert.equal(res.status, 400)
    assert.equal(JSON.parse(res.body).error, 40004)
  })

  test('a leading UTF-8 byte order mark is ignored', async () => {
    const res = await s.post(`\ufeff{"id":${uniqueId()},"name":"bom"}`)
    assert.equal(res.status, 200)
  })
})

describe('a body is read whether it comes with its headers or after them', () => {
  test('a body sent in a later write than its headers, in two parts, is read whole', async (t) => {
    const socket = await openSocket(s.base)
    t.after(() => socket.destroy())
    const id = uniqueId()
    const body = `{"id":${id},"name":"sent later"}`
    const request = createRequest(body, `Authorization: Bearer ${s.token}\r\n`)
    const headEnd = request.indexOf('\r\n\r\n') + 4
    const answered = exchange(socket, request.slice(0, headEnd))
    for (const part of [body.slice(0, 10), body.slice(10)]) {
      await new Promise((r) => setTimeout(r, 50))
      socket.write(part)
    }
    const res = await answered
    assert.equal(res.status, 200)
    assert.deepEqual(JSON.parse(res.body), { name: 'sent later' })
  })

  test('a refusal of a body that came whole with its headers leaves the connection open for the next request', async (t) => {
    const socket = await openSocket(s.base)
    t.after(() => socket.destroy())
    const auth = `Authorization: Bearer ${s.token}\r\n`
    const refused = await exchange(socket, createRequest('{"id":1,"name":"x",}', auth))
    assert.equal(refused.status, 400)
    assert.equal(JSON.parse(refused.body).error, 40004)
    assert.equal(refused.headers.connection, 'keep-alive')
    const next = await exchange(socket, createRequest(`{"id":${uniqueId()},"name":"next"}`, auth))
    assert.equal(next.status, 200)
    assert.deepEqual(JSON.parse(next.body), { name: 'next' })
  })
})
