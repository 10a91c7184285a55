import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer, uniqueId } from './helpers/server.ts'

// The limits of src/http/rate-limit.ts as a client meets them: failed authentications per
// address (AUTH_FAILURE_LIMIT, 42901) and requests per token (RATE_LIMIT, 42902).

describe('abuse: limits a client can read', () => {
  const badPost = (base: string, headers: Record<string, string> = {}) =>
    fetch(`${base}/plants`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer pst_wrong',
        'content-type': 'application/json',
        ...headers,
      },
      body: '{}',
    })

  test('failed authentications past AUTH_FAILURE_LIMIT from one address get 429 / 42901 with Retry-After; a valid token from there still gets 200', async () => {
    const limited = await startTestServer({ after }, { env: { AUTH_FAILURE_LIMIT: '5' } })
    const answers: { status: number; error: number; retryAfter: string | null }[] = []
    for (let i = 0; i < 12; i++) {
      // Without a trusted proxy, X-Forwarded-For is the client's own claim, and ignored.
      const res = await badPost(limited.base, { 'x-forwarded-for': `198.51.100.${i}` })
      const body = (await res.json()) as { error: number }
      answers.push({
        status: res.status,
        error: body.error,
        retryAfter: res.headers.get('retry-after'),
      })
    }
    assert.deepEqual(
      answers.slice(0, 5).map((a) => a.error),
      [40102, 40102, 40102, 40102, 40102],
    )
    const refused = answers.slice(5).filter((a) => a.error === 42901)
    assert.ok(refused.length >= 6, JSON.stringify(answers))
    for (const a of refused) {
      assert.equal(a.status, 429)
      assert.ok(Number(a.retryAfter) >= 1, `Retry-After ${a.retryAfter}`)
    }
    assert.equal((await limited.post({ id: uniqueId(), name: 'still welcome' })).status, 200)
  })

  test('each instance counts its own failures: one past AUTH_FAILURE_LIMIT answers 429 while another on the same database still answers 401', async () => {
    const a = await startTestServer({ after }, { env: { AUTH_FAILURE_LIMIT: '3' } })
    const b = await startTestServer({ after }, { db: a.db, env: { AUTH_FAILURE_LIMIT: '3' } })
    const statuses = async (base: string, n: number) => {
      const out: number[] = []
      for (let i = 0; i < n; i++) {
        const res = await badPost(base)
        await res.arrayBuffer()
        out.push(res.status)
      }
      return out
    }
    assert.deepEqual(await statuses(a.base, 5), [401, 401, 401, 429, 429])
    // The same client, the same window: the other instance has counted nothing yet.
    assert.deepEqual(await statuses(b.base, 4), [401, 401, 401, 429])
  })

  test('behind a proxy in TRUSTED_PROXIES, the forwarded address is the client: limited on its own and named in the log', async () => {
    const proxied = await startTestServer(
      { after },
      { env: { AUTH_FAILURE_LIMIT: '3', TRUSTED_PROXIES: '127.0.0.1' } },
    )
    const statuses: number[] = []
    for (let i = 0; i < 5; i++)
      statuses.push(
        (await badPost(proxied.base, { 'x-forwarded-for': '192.0.2.1, 203.0.113.7' })).status,
      )
    assert.deepEqual(statuses, [401, 401, 401, 429, 429])
    const other = await badPost(proxied.base, {
      'x-forwarded-for': '203.0.113.8',
      'x-request-id': 'other-client',
    })
    assert.equal(other.status, 401)
    await other.arrayBuffer()
    assert.equal(proxied.logs.find((l) => l.requestId === 'other-client')?.client, '203.0.113.8')
  })

  test('RATE_LIMIT: a token past its rate gets 429 / 42902 with Retry-After, every answer to it carries RateLimit and RateLimit-Policy, and other tokens go on', async () => {
    const limited = await startTestServer({ after }, { env: { RATE_LIMIT: '3' } })
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => limited.post({ id: uniqueId(), name: 'rated' })),
    )
    const statuses = answers.map((r) => r.status)
    assert.ok(statuses.filter((st) => st === 200).length <= 4, `${statuses}`)
    assert.ok(statuses.filter((st) => st === 429).length >= 6, `${statuses}`)
    for (const res of answers) {
      assert.equal(res.headers.get('ratelimit-policy'), '"token";q=3;w=1')
      assert.match(res.headers.get('ratelimit') ?? '', /^"token";r=\d+;t=\d+$/)
      const body = (await res.json()) as { error?: number }
      if (res.status === 429) {
        assert.equal(body.error, 42902)
        assert.ok(Number(res.headers.get('retry-after')) >= 1)
      }
    }
    const other = await limited.newToken(`other-${uniqueId()}`)
    assert.equal(
      (await limited.post({ id: uniqueId(), name: 'other' }, { token: other })).status,
      200,
    )
  })
})
