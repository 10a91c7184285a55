import assert from 'node:assert/strict'
import { request } from 'node:http'
import { after, describe, test } from 'node:test'
import { limits } from '../../src/limits.ts'
import { createTestDatabase } from '../helpers/database.ts'
import { haproxyPath, haproxyPresent, haproxySkip, startHaproxy } from '../helpers/haproxy.ts'
import { startTestServer, uniqueId } from '../helpers/server.ts'
import { startTcpProxy } from '../helpers/tcp-proxy.ts'
import { sleep } from '../helpers/wait.ts'

/**
 * One request on a connection of its own (its set-up counted, as a client that does not keep
 * connections alive sees it): the status and the milliseconds from the start to the whole answer.
 */
function timed(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; ms: number }> {
  const started = performance.now()
  return new Promise((resolve, reject) => {
    const req = request(url, { method: init.method ?? 'GET', headers: init.headers, agent: false })
    req.on('response', (res) => {
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - started }))
    })
    req.on('error', reject)
    req.end(init.body)
  })
}

describe('the promised times behind HAProxy', () => {
  test('a database that stops answering, behind HAProxy, each request on a new connection: creates answered 503 within 6 s and /readyz 503 within 2 s, as the client measures them', {
    skip: haproxySkip,
  }, async () => {
    assert.ok(haproxyPresent, `CI needs ${haproxyPath} (apt-get install haproxy)`)
    const db = await createTestDatabase({ after })
    const proxy = await startTcpProxy(db.url)
    after(() => proxy.close())
    const s = await startTestServer({ after }, { db, connectTo: () => proxy.url })
    const balancer = await startHaproxy({ after }, [Number(new URL(s.base).port)])
    const create = () =>
      timed(`${balancer.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${s.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id: uniqueId(), name: 'behind haproxy' }),
      })
    assert.equal((await create()).status, 200)

    // Nothing reaches PostgreSQL any more, and nothing is refused: only the deadlines answer.
    proxy.freeze()
    const [creates, probes] = await Promise.all([
      Promise.all(Array.from({ length: 8 }, create)),
      Promise.all(
        Array.from({ length: 3 }, async (_, i) => {
          await sleep(500 * i)
          return timed(`${balancer.url}/readyz`)
        }),
      ),
    ])
    await proxy.cut()
    const shown = JSON.stringify({ creates, probes })
    process.stderr.write(`# behind HAProxy, the database frozen: ${shown}\n`)
    for (const c of creates) {
      assert.equal(c.status, 503, shown)
      assert.ok(c.ms <= limits.database.request, `a 503 after more than 6 s: ${shown}`)
    }
    for (const p of probes) {
      assert.equal(p.status, 503, shown)
      assert.ok(p.ms <= limits.database.readiness, `/readyz after more than 2 s: ${shown}`)
    }
  })
})
