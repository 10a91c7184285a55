import assert from 'node:assert/strict'
import type { IncomingMessage } from 'node:http'
import { describe, test } from 'node:test'
import { contentAnswer, jsonAnswer, matchesIfNoneMatch } from '../src/http/answer.ts'
import { failure } from '../src/http/errors.ts'
import { reply } from '../src/http/types.ts'

describe('answers: how an outcome becomes status, headers and body', () => {
  test('a reply is JSON, never cached, with its length; a failure carries its code, message and headers', () => {
    const ok = jsonAnswer(reply({ name: 'Fern' }))
    assert.equal(ok.status, 200)
    assert.equal(ok.body, '{"name":"Fern"}')
    assert.equal(ok.headers['content-length'], 15)
    assert.equal(ok.headers['cache-control'], 'no-store')
    assert.equal(ok.headers['x-content-type-options'], 'nosniff')
    const refused = jsonAnswer(failure(40102, 'the token is unknown or revoked'))
    assert.equal(refused.status, 401)
    assert.deepEqual(JSON.parse(String(refused.body)), {
      error: 40102,
      message: 'the token is unknown or revoked',
    })
    assert.match(String(refused.headers['www-authenticate']), /^Bearer realm="plants"/)
  })

  test('If-None-Match by the weak comparison: a listed tag, its W/ form, or *', () => {
    assert.equal(matchesIfNoneMatch('"a1"', '"a1"'), true)
    assert.equal(matchesIfNoneMatch('W/"a1"', '"a1"'), true)
    assert.equal(matchesIfNoneMatch('"zz", "a1"', '"a1"'), true)
    assert.equal(matchesIfNoneMatch('*', '"a1"'), true)
    assert.equal(matchesIfNoneMatch('"a2"', '"a1"'), false)
    assert.equal(matchesIfNoneMatch(undefined, '"a1"'), false)
  })

  test('content whose ETag the request names is 304 without a body; otherwise 200 with it', () => {
    const content = {
      kind: 'content' as const,
      type: 'text/css',
      body: Buffer.from('p{}'),
      cacheControl: 'public, max-age=3600',
      etag: '"v1"',
    }
    const ask = (header?: string) =>
      ({ headers: header === undefined ? {} : { 'if-none-match': header } }) as IncomingMessage
    const fresh = contentAnswer(ask('"v1"'), content)
    assert.deepEqual([fresh.status, fresh.body, fresh.headers.etag], [304, '', '"v1"'])
    const full = contentAnswer(ask(), content)
    assert.deepEqual(
      [full.status, String(full.body), full.headers['content-length']],
      [200, 'p{}', 3],
    )
  })
})
