import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import { after, describe, test } from 'node:test'
import { authenticate } from '../src/auth/authenticate.ts'
import type { TokenCache } from '../src/auth/token-cache.ts'
import { tokenDigest } from '../src/auth/tokens.ts'
import { openSocket, rawRequest, readUntilClosed } from './helpers/raw-http.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

const s = await startTestServer({ after })

async function withAuthorization(value: string | undefined) {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (value !== undefined) headers.authorization = value
  const res = await fetch(`${s.base}/plants`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ id: uniqueId(), name: 'x' }),
  })
  const body = (await res.json()) as { error: number; message: string }
  return {
    status: res.status,
    error: body.error,
    message: body.message,
    challenge: res.headers.get('www-authenticate'),
  }
}

describe('bearer authentication', () => {
  test('no Authorization header is 401/40101 with a Bearer challenge', async () => {
    const r = await withAuthorization(undefined)
    assert.deepEqual([r.status, r.error, r.challenge], [401, 40101, 'Bearer realm="plants"'])
  })

  for (const value of ['Basic dXNlcjpwYXNz', 'Token abc', 'Bearerx abc']) {
    test(`a scheme other than Bearer (${value}) is 401/40101`, async () => {
      const r = await withAuthorization(value)
      assert.deepEqual([r.status, r.error, r.challenge], [401, 40101, 'Bearer realm="plants"'])
    })
  }

  for (const value of [
    'Bearer',
    'Bearer ',
    'Bearer  two-spaces',
    'Bearer a b',
    'Bearer ab$c',
    'Bearer =abc',
    'Bearer a=b',
  ]) {
    test(`a malformed Bearer header (${JSON.stringify(value)}) is 400/40010 with error="invalid_request"`, async () => {
      const r = await withAuthorization(value)
      assert.deepEqual(
        [r.status, r.error, r.challenge],
        [400, 40010, 'Bearer realm="plants", error="invalid_request"'],
      )
    })
  }

  test('two Authorization headers are 400/40010', async () => {
    const res = await rawRequest(
      s.base,
      `POST /plants HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${s.token}\r\nAuthorization: Bearer other\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
    )
    assert.equal(res.status, 400)
    assert.equal(JSON.parse(res.body).error, 40010)
  })

  test('an unknown token is 401/40102 with error="invalid_token"', async () => {
    const r = await withAuthorization('Bearer pst_unknownunknownunknownunknownunknown00000')
    assert.deepEqual(
      [r.status, r.error, r.challenge],
      [401, 40102, 'Bearer realm="plants", error="invalid_token"'],
    )
  })

  test('a token of the checksummed shape whose checksum does not match is 401/40102 before any look-up of the token', async () => {
    const body = s.token.slice(0, -6)
    const wrong = `${body}${s.token.slice(-6) === '000000' ? '000001' : '000000'}`
    const r = await withAuthorization(`Bearer ${wrong}`)
    assert.deepEqual([r.status, r.error], [401, 40102])
    // authenticate() never asks the token cache about it.
    const asked: string[] = []
    const cache = {
      verify: (t: string) => {
        asked.push(t)
        return undefined
      },
    } as unknown as TokenCache
    const request = (token: string) =>
      ({
        headers: { authorization: `Bearer ${token}` },
        rawHeaders: ['Authorization', `Bearer ${token}`],
      }) as unknown as IncomingMessage
    assert.equal((authenticate(request(wrong), cache) as { code?: number }).code, 40102)
    assert.deepEqual(asked, [])
    authenticate(request(s.token), cache)
    assert.deepEqual(asked, [s.token])
  })

  test('a token made before tokens carried a checksum (pst_ and 43 base64url characters) keeps working', async () => {
    const name = `legacy-${uniqueId()}`
    const legacy = `pst_${randomBytes(32).toString('base64url')}`
    await s.db
      .sql`insert into api_tokens (name, token_sha256) values (${name}, ${tokenDigest(legacy)})`
    await s.tokens.reload()
    const res = await fetch(`${s.base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${legacy}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: uniqueId(), name: 'legacy' }),
    })
    assert.equal(res.status, 200)
  })

  test('a token that is nearly right (last character changed) is 401/40102', async () => {
    const last = s.token.at(-1) === 'A' ? 'B' : 'A'
    const r = await withAuthorization(`Bearer ${s.token.slice(0, -1)}${last}`)
    assert.deepEqual([r.status, r.error], [401, 40102])
  })

  test('a revoked token is 401/40102', async () => {
    const name = `revoked-${uniqueId()}`
    const token = await s.newToken(name)
    assert.equal((await s.post({ id: uniqueId(), name: 'ok' }, { token })).status, 200)
    await s.db.sql`update api_tokens set revoked_at = now() where name = ${name}`
    await s.tokens.reload()
    const res = await s.post({ id: uniqueId(), name: 'no' }, { token })
    assert.equal(res.status, 401)
    assert.equal(((await res.json()) as { error: number }).error, 40102)
  })

  test('a token verified many times is refused within 1 s of its revocation, by the notification alone', async () => {
    const name = `cached-${uniqueId()}`
    const token = await s.newToken(name)
    for (let i = 0; i < 20; i++) {
      const res = await s.post({ id: uniqueId(), name: 'ok' }, { token })
      assert.equal(res.status, 200)
    }
    await s.db.sql`update api_tokens set revoked_at = now() where name = ${name}`
    await within(
      1000,
      async () => (await s.post({ id: uniqueId(), name: 'no' }, { token })).status === 401,
    )
    // The other tokens are verified again after the reload that cleared the cache.
    assert.equal((await s.post({ id: uniqueId(), name: 'still ok' })).status, 200)
  })

  test('the scheme name is case-insensitive', async () => {
    assert.equal((await withAuthorization(`bEaReR ${s.token}`)).status, 200)
  })

  test('credentials are checked before the content type, size and JSON', async () => {
    const raw = await rawRequest(
      s.base,
      'POST /plants HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n{bad}',
    )
    assert.equal(raw.status, 401)
    assert.equal(JSON.parse(raw.body).error, 40101)
  })

  test('a request without valid credentials is answered without its body being read', async () => {
    // The body is declared but never sent: an answer proves the server did not wait for it.
    const socket = await openSocket(s.base)
    const answer = readUntilClosed(socket)
    socket.write(
      'POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer pst_wrong\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n',
    )
    const res = await answer
    assert.equal(res.status, 401)
    assert.equal(res.headers.connection, 'close')
    assert.ok(res.elapsedMs < 2000, `answered after ${res.elapsedMs} ms`)
  })

  test('no response or log line contains the token', async () => {
    const token = await s.newToken(`secret-${uniqueId()}`)
    const res = await s.post({ id: uniqueId(), name: 'x' }, { token })
    const text = JSON.stringify([...res.headers]) + (await res.text())
    assert.ok(!text.includes(token))
    assert.ok(!JSON.stringify(s.logs).includes(token))
    assert.ok(!JSON.stringify(s.logs).includes(s.token))
  })
})
