import assert from 'node:assert/strict'
import type { AddressInfo } from 'node:net'
import { after, describe, test } from 'node:test'
import { createRouter } from '../src/http/router.ts'
import { createHttpServer } from '../src/http/server.ts'
import { reply } from '../src/http/types.ts'
import { createLog } from '../src/log.ts'

const echo = (name: string) => (_req: unknown, ctx: { params: Readonly<Record<string, string>> }) =>
  reply({ route: name, params: ctx.params })

const routes = [
  { method: 'POST', path: '/plants', handler: echo('create') },
  { method: 'GET', path: '/plants/:id', handler: echo('read') },
  { method: 'GET', path: '/plants/:id/tags/:tag', handler: echo('tag') },
]

describe('the route table', () => {
  const route = createRouter(routes)

  test('a path with parameters hands back its pattern and the decoded segments', () => {
    const { target, pattern, params } = route('GET', '/plants/42')
    assert.equal(typeof target, 'function')
    assert.equal(pattern, '/plants/:id')
    assert.deepEqual(params, { id: '42' })
    assert.deepEqual(route('GET', '/plants/a%20b/tags/x%2Fy').params, { id: 'a b', tag: 'x/y' })
  })

  test('an exact path matches only itself, HEAD goes to GET, and no parameter is empty', () => {
    assert.equal(route('POST', '/plants').pattern, '/plants')
    assert.equal(route('HEAD', '/plants/7').pattern, '/plants/:id')
    for (const path of [
      '/plants/',
      '/plants//tags/x',
      '/plants/1/2',
      '/PLANTS',
      '/plants/%E0%A4%A',
    ])
      assert.deepEqual(
        [route('GET', path).pattern, (route('GET', path).target as { code?: number }).code],
        [undefined, 40401],
        path,
      )
  })

  test('another method on a known path is 405 with its Allow list, and keeps the pattern', () => {
    const { target, pattern } = route('DELETE', '/plants/9')
    assert.equal(pattern, '/plants/:id')
    assert.equal((target as { code?: number }).code, 40501)
    assert.deepEqual((target as { allow?: string[] }).allow, ['GET', 'HEAD'])
  })
})

describe('the HTTP adapter with a route that has a parameter', () => {
  test('requests are counted under the pattern, never the raw path, and the handler gets the parameter', async () => {
    const labels: string[] = []
    const server = createHttpServer({
      route: createRouter(routes),
      log: createLog('error', () => {}),
      metrics: { requestAnswered: (_m, label) => labels.push(label), unavailable: () => {} },
    })
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done))
    after(() => new Promise<void>((done) => server.close(() => done())))
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const first = await fetch(`${base}/plants/1001`)
    assert.deepEqual(await first.json(), { route: 'read', params: { id: '1001' } })
    for (const path of ['/plants/1002', '/plants/x/tags/y', '/nowhere/1'])
      await (await fetch(`${base}${path}`)).arrayBuffer()
    await (await fetch(`${base}/plants/3`, { method: 'PUT' })).arrayBuffer()
    assert.deepEqual(labels, [
      '/plants/:id',
      '/plants/:id',
      '/plants/:id/tags/:tag',
      'unmatched',
      '/plants/:id',
    ])
  })
})
