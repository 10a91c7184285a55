import assert from 'node:assert/strict'
import type { Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { limits } from '../src/limits.ts'
import { createTestDatabase, insertsRunning, type TestDatabase } from './helpers/database.ts'
import { type ServiceProcess, startServiceProcess, tokenFor } from './helpers/process.ts'
import { exchange, openSocket } from './helpers/raw-http.ts'
import { sleep, within } from './helpers/wait.ts'

/** `GET /healthz` on a kept-alive `socket`: the status and the Connection field of the answer. */
async function healthOn(
  socket: Socket,
): Promise<{ status: number; connection: string | undefined }> {
  const res = await exchange(socket, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  return { status: res.status, connection: res.headers.connection?.toLowerCase() }
}

/**
 * Sends `signal` while a create of `id` is in flight (held behind a lock on plants), runs
 * `whileLocked` once the service says it received it, then lets the create go: it must
 * complete, its row committed.
 * Resolves with the moment the signal was sent.
 */
async function signalWithCreateInFlight(
  db: TestDatabase,
  service: ServiceProcess,
  token: string,
  signal: NodeJS.Signals,
  id: number,
  whileLocked: () => Promise<void>,
): Promise<number> {
  let inFlight: Promise<Response> | undefined
  let signalled = 0
  await db.sql.begin(async (tx) => {
    await tx`lock table plants in access exclusive mode`
    inFlight = fetch(`${service.base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id, name: 'in flight' }),
    })
    await within(5000, async () => (await insertsRunning(db.sql, 'Lock')) > 0)
    service.child.kill(signal)
    signalled = performance.now()
    await within(5000, () =>
      service.lines.some(
        (l) => String(l.message).startsWith('signal received') && l.signal === signal,
      ),
    )
    await whileLocked()
  })
  const res = await inFlight
  assert.equal(res?.status, 200)
  assert.deepEqual(await res?.json(), { name: 'in flight' })
  assert.equal((await db.sql`select 1 from plants where id = ${id}`).length, 1)
  return signalled
}

describe('SIGTERM and SIGINT', () => {
  test(`SIGTERM: /readyz 503 at once, serving on with Connection: close for the drain delay, idle keep-alive connections left open until it ends, the request in flight finished, the port closed after it, exit 0 within ${limits.drain / 1000} s`, async () => {
    const db = await createTestDatabase({ after })
    const service = await startServiceProcess(
      'node',
      { DATABASE_URL: db.url, DRAIN_DELAY: '2' },
      { after },
    )
    const token = await tokenFor(db.sql, service.base, 'drain')
    // A balancer's kept-alive connection, idle when the signal comes.
    const idle = await openSocket(service.base)
    after(() => idle.destroy())
    assert.deepEqual(await healthOn(idle), { status: 200, connection: 'keep-alive' })

    const signalled = await signalWithCreateInFlight(
      db,
      service,
      token,
      'SIGTERM',
      424243,
      async () => {
        const ready = await fetch(`${service.base}/readyz`)
        assert.equal(ready.status, 503)
        assert.match(((await ready.json()) as { message: string }).message, /shutting down/)
        // The idle connection was not closed under the balancer: its next request is answered,
        // and the answer closes it.
        assert.deepEqual(await healthOn(idle), { status: 200, connection: 'close' })
        // New connections are still taken during the delay.
        const fresh = await fetch(`${service.base}/healthz`)
        assert.equal(fresh.status, 200)
        assert.equal(fresh.headers.get('connection'), 'close')
      },
    )
    await sleep(Math.max(0, signalled + 2000 + 300 - performance.now()))
    await assert.rejects(fetch(`${service.base}/healthz`), 'the port still takes connections')
    assert.equal(await service.exited, 0)
    assert.ok(performance.now() - signalled < limits.drain, 'the stop took too long')
    assert.ok(service.lines.some((l) => l.message === 'stopped'))
  })

  test('SIGINT stops accepting at once, finishes the request in flight with its row committed, and exits 0', async () => {
    const db = await createTestDatabase({ after })
    const service = await startServiceProcess('node', { DATABASE_URL: db.url }, { after })
    const token = await tokenFor(db.sql, service.base, 'shutdown')

    await signalWithCreateInFlight(db, service, token, 'SIGINT', 424242, () =>
      assert.rejects(
        fetch(`${service.base}/healthz`),
        'a new connection is refused while stopping',
      ),
    )
    assert.equal(await service.exited, 0)
    assert.ok(service.lines.some((l) => l.message === 'stopped'))
  })
})
