import assert from 'node:assert/strict'
import type { Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { hostConnector } from '../src/db/reach/hosts.ts'
import { openStatementSlots } from '../src/db/reach/slots.ts'
import { createSql } from '../src/db/reach/sql.ts'
import { createTestDatabase, quietLog } from './helpers/database.ts'
import { startTcpProxy } from './helpers/tcp-proxy.ts'
import { sleep } from './helpers/wait.ts'

const db = await createTestDatabase({ after })

/** Settles `work` within `ms`, or says it did not. */
function settled<T>(work: Promise<T>, ms: number): Promise<'ok' | 'failed' | 'pending'> {
  return Promise.race([
    work.then(
      () => 'ok' as const,
      () => 'failed' as const,
    ),
    new Promise<'pending'>((r) => setTimeout(() => r('pending'), ms).unref()),
  ])
}

describe('statement slots (a connection of their own per statement in flight)', () => {
  test('statements sent just as the server ends the session each succeed or fail, none waits for ever, and the slot serves the next', async () => {
    for (let round = 0; round < 5; round++) {
      const [slot] = openStatementSlots(db.url, quietLog, 1)
      assert.ok(slot)
      await slot.sql`select 1`
      await db.sql`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name = 'plant-store' and datname = current_database()
          and pid <> pg_backend_pid()`
      // postgres.js pipelined the later ones onto the dying connection and never settled them.
      const outcomes = await Promise.all(
        [1, 2, 3].map(() => settled(slot.sql`select 1`.execute(), 5000)),
      )
      assert.ok(!outcomes.includes('pending'), `round ${round}: ${outcomes.join(', ')}`)
      assert.equal(await settled(slot.sql`select 1`.execute(), 5000), 'ok')
      await slot.end()
    }
  })

  test('cut fails the statement in flight at once with its reason, and the slot opens a new connection', async () => {
    const proxy = await startTcpProxy(db.url)
    after(() => proxy.close())
    const [slot] = openStatementSlots(proxy.url, quietLog, 1)
    assert.ok(slot)
    after(() => slot.end())
    await slot.sql`select 1`
    proxy.freeze()
    const stuck = slot.sql`select 1`.execute()
    await sleep(300)
    const started = performance.now()
    assert.equal(slot.cut(new Error('cut loose by the test')), 1, 'one socket was open')
    await assert.rejects(stuck, /cut loose by the test/)
    assert.ok(performance.now() - started < 1000)
    await proxy.cut()
    await proxy.restore()
    const [row] = await slot.sql<{ one: number }[]>`select 1 as one`
    assert.equal(row?.one, 1)
  })
  test("a statement is handed to its socket at once, not on the event loop's next turn", async () => {
    const sockets: Socket[] = []
    const sql = createSql(db.url, quietLog, {
      max: 1,
      socket: hostConnector(db.url).hooks({ opened: (s) => sockets.push(s) }),
    })
    after(() => sql.end())
    await sql`select 1`
    const [socket] = sockets
    assert.ok(socket, 'the connection opened a socket')
    // Sent from a callback of the loop's check phase, as the batcher sends its statements; what
    // the driver puts off with setImmediate runs only after `checked`, queued first.
    const bytes = await new Promise<{ before: number; after: number }>((resolve) => {
      setImmediate(() => {
        const before = socket.bytesWritten
        setImmediate(function checked() {
          resolve({ before, after: socket.bytesWritten })
        })
        void sql`select 2`.execute()
      })
    })
    assert.ok(bytes.after > bytes.before, `${bytes.after - bytes.before} bytes written`)
  })

  test("a slot primes its backend's memory once per pool, before its first statement: at the start and after a cut", async () => {
    const proxy = await startTcpProxy(db.url)
    after(() => proxy.close())
    const [slot] = openStatementSlots(proxy.url, quietLog, 1)
    assert.ok(slot)
    after(() => slot.end())
    const statement = () => slot.forStatement()`select 'slot statement' as s`.execute()
    for (let i = 0; i < 3; i++) await statement()
    slot.cut(new Error('cut by the test'))
    for (let i = 0; i < 3; i++) await statement()

    const used = proxy.queries().filter((sent) => sent.some((q) => q.includes('slot statement')))
    const shown = used.map((sent) => sent.join(' | ')).join(' // ')
    assert.equal(used.length, 2, `the first connection and the one after the cut: ${shown}`)
    for (const sent of used) {
      assert.match(sent[0] ?? '', /repeat\('x'/, `primed first: ${shown}`)
      assert.equal(sent.filter((q) => q.includes("repeat('x'")).length, 1, `primed once: ${shown}`)
    }
  })
})
