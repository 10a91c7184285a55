import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer } from './helpers/server.ts'

const s = await startTestServer({ after })

describe('paths, methods and request ids', () => {
  for (const path of ['/', '/plant', '/plants/', '/PLANTS', '/plants/1', '/healthz/']) {
    test(`${path} is 404/40401 with an Error body`, async () => {
      const res = await fetch(`${s.base}${path}`, { method: 'POST' })
      assert.equal(res.status, 404)
      assert.match(res.headers.get('content-type') ?? '', /^application\/json/)
      assert.equal(((await res.json()) as { error: number }).error, 40401)
    })
  }

  for (const [method, path, allow] of [
    ['GET', '/plants', 'POST'],
    ['PUT', '/plants', 'POST'],
    ['DELETE', '/plants', 'POST'],
    ['POST', '/healthz', 'GET, HEAD'],
    ['PATCH', '/readyz', 'GET, HEAD'],
  ] as const) {
    test(`${method} ${path} is 405/40501 with Allow: ${allow}`, async () => {
      const res = await fetch(`${s.base}${path}`, { method })
      assert.equal(res.status, 405)
      assert.equal(res.headers.get('allow'), allow)
      assert.equal(((await res.json()) as { error: number }).error, 40501)
    })
  }

  test('the method is checked before the credentials', async () => {
    const res = await fetch(`${s.base}/plants`, { method: 'GET' })
    assert.equal(res.status, 405)
  })

  test('a query string is ignored', async () => {
    const res = await fetch(`${s.base}/healthz?verbose=1`)
    assert.equal(res.status, 200)
    const post = await fetch(`${s.base}/plants?x=1`, { method: 'GET' })
    assert.equal(post.status, 405)
  })

  test('HEAD is answered like GET, without a body', async () => {
    for (const path of ['/healthz', '/readyz']) {
      const get = await fetch(`${s.base}${path}`)
      const head = await fetch(`${s.base}${path}`, { method: 'HEAD' })
      assert.equal(head.status, get.status)
      assert.equal(head.headers.get('content-length'), get.headers.get('content-length'))
      assert.equal(await head.text(), '')
    }
  })

  test('a valid client X-Request-Id is echoed and logged', async () => {
    const id = `req-${Date.now()}.A_b`
    const res = await fetch(`${s.base}/healthz`, { headers: { 'x-request-id': id } })
    assert.equal(res.headers.get('x-request-id'), id)
    assert.ok(s.logs.some((l) => l.requestId === id && l.path === '/healthz'))
  })

  for (const bad of ['', 'has space', 'a/b', 'x'.repeat(129), 'ünï']) {
    test(`an invalid X-Request-Id (${JSON.stringify(bad.slice(0, 12))}) is replaced by a generated one`, async () => {
      const res = await fetch(`${s.base}/nope`, { headers: { 'x-request-id': bad } })
      const id = res.headers.get('x-request-id') ?? ''
      assert.notEqual(id, bad)
      assert.match(id, /^[A-Za-z0-9._-]{1,128}$/)
    })
  }

  test('every response carries an X-Request-Id, errors included', async () => {
    for (const res of [
      await fetch(`${s.base}/nope`),
      await s.post({}),
      await fetch(`${s.base}/healthz`),
    ]) {
      assert.match(res.headers.get('x-request-id') ?? '', /^[A-Za-z0-9._-]{1,128}$/)
    }
  })
})
