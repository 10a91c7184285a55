import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import type { Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { limits } from '../../src/limits.ts'
import { createTestDatabase } from '../helpers/database.ts'
import {
  openFiles,
  socketInode,
  socketsTo,
  startServiceProcess,
  tokenFor,
} from '../helpers/process.ts'
import { createRequest, exchange, openSocket } from '../helpers/raw-http.ts'
import { within } from '../helpers/wait.ts'

// README, Limits: out of file handles (EMFILE) opening a database connection holds a create and
// sends it again until its deadline, then 503 / 50301 with Retry-After: 1, never 500; the
// service recovers once handles are free again.

type Answer = { status: number; retryAfter: string | undefined; body: string }

/** A create on `socket`, kept alive: writes the request and reads one whole answer. */
async function create(socket: Socket, token: string, id: number): Promise<Answer> {
  const res = await exchange(
    socket,
    createRequest(JSON.stringify({ id, name: 'handles' }), `Authorization: Bearer ${token}\r\n`),
  )
  return { status: res.status, retryAfter: res.headers['retry-after'], body: res.body }
}

describe('out of file handles', () => {
  test('a service out of file handles when it must reconnect answers 503 with Retry-After: 1 at the deadline, never 500, and 200 again once handles are free', async () => {
    const db = await createTestDatabase({ after })
    const service = await startServiceProcess(
      'node',
      { DATABASE_URL: db.url, MAX_CONNECTIONS: '1000000', AUTH_FAILURE_LIMIT: 'off' },
      { after },
    )
    const pid = service.child.pid ?? 0
    const token = await tokenFor(db.sql, service.base, 'handles')
    // One connection opened now, while handles are free, carries every create of the test.
    const client = await openSocket(service.base)
    after(() => client.destroy())
    const second = await openSocket(service.base)
    after(() => second.destroy())
    assert.equal((await create(client, token, 1)).status, 200)

    // Out of handles for certain: a file the process opens gets the lowest free number, and
    // fails (EMFILE) when every number below its limit is taken. So the limit is set to the
    // lowest number it holds a database socket on (or its first free number, if lower): every
    // number below it is taken by what the process keeps for its life (standard streams, the
    // event loop's own, the listening socket), and whatever it closes from then on (the
    // database's sockets, connections) frees a number at or above the limit, which it cannot
    // use. Nothing a connection of ours does, and no timing, can give it a handle back.
    const databasePort = Number(new URL(db.url).port || 5432)
    const toDatabase = socketsTo(pid, databasePort, { anyState: true })
    assert.ok(toDatabase.size > 0, 'the service holds connections to the database')
    const before = openFiles(pid)
    const open = new Set(before.map((f) => f.fd))
    let firstFree = 0
    while (open.has(firstFree)) firstFree++
    const databaseFds = before
      .filter((f) => toDatabase.has(socketInode(f.target) ?? ''))
      .map((f) => f.fd)
    const limit = Math.min(firstFree, ...databaseFds)
    const kept = before.filter((f) => f.fd < limit)
    // Its soft limit only: the hard one stays, so that it can be raised again.
    const [, soft = '', hard = ''] =
      /Max open files\s+(\d+)\s+(\d+)/.exec(readFileSync(`/proc/${pid}/limits`, 'utf8')) ?? []
    const setLimit = (n: number | string) => {
      const set = spawnSync('prlimit', [`--pid=${pid}`, `--nofile=${n}:${hard}`])
      assert.equal(set.status, 0, set.stderr?.toString())
    }
    setLimit(limit)
    after(() => spawnSync('prlimit', [`--pid=${pid}`, `--nofile=${soft}:${hard}`]))

    // The database ends the service's sessions; the creates must connect again, and cannot.
    const ended = await db.sql<{ pid: number }[]>`
      select pid, pg_terminate_backend(pid) from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid()`
    await within(5000, async () => {
      const [left] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where pid = any(${ended.map((r) => r.pid)}::int[])`
      return left?.n === 0
    })
    // The service has closed its sockets of the ended sessions (so a create meets none of them
    // alive), and holds no number below the limit but those it held before.
    await within(10_000, async () => {
      const now = socketsTo(pid, databasePort, { anyState: true })
      return ![...toDatabase].some((inode) => now.has(inode))
    })
    const below = () => openFiles(pid).filter((f) => f.fd < limit)
    assert.deepEqual(
      below(),
      kept,
      `no handle below the limit freed: ${JSON.stringify({ limit, before, now: openFiles(pid) })}`,
    )
    // The service closes a connection idle 5 s after an answer: ours ask for /healthz (an answer
    // opens no file) just before the creates.
    const ping = (socket: Socket) => exchange(socket, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
    await Promise.all([client, second].map(ping))
    const timed = async (socket: Socket, id: number) => {
      const started = performance.now()
      const answer = await create(socket, token, id)
      return { answer, ms: performance.now() - started }
    }
    const both = await Promise.all([timed(client, 2), timed(second, 3)])
    const answers = both.map((b) => b.answer)
    const took = both.map((b) => b.ms)
    // What a failure needs to be understood: when each answer came, the numbers below the
    // limit then and before, and what the service logged but requests.
    const said = () =>
      JSON.stringify({
        took: took.map(Math.round),
        limit,
        before: kept,
        now: below(),
        logged: service.lines
          .filter((l) => l.message !== 'request' || l.path === '/plants')
          .map((l) => `${l.time} ${l.level} ${l.message} ${l.error ?? l.status ?? ''}`),
      })
    assert.deepEqual(
      answers.filter((a) => a.status !== 503),
      [],
      `every create while out of handles is 503; ${answers.some((a) => a.status !== 503) ? said() : ''}`,
    )
    assert.ok(answers.every((a) => a.retryAfter === '1' && a.body.includes('50301')))
    // Held, and sent again, until the deadline: no handle freed up for them.
    assert.ok(
      took.every(
        (ms) => ms >= limits.database.request - 1000 && ms <= limits.database.request + 500,
      ),
      `answered after ${took.map(Math.round).join(', ')} ms`,
    )
    assert.ok(
      service.lines.some((l) => /EMFILE/.test(JSON.stringify(l))),
      'the log names EMFILE',
    )

    // Handles free again (its limit as it was): creates succeed within 5 s.
    setLimit(soft)
    let id = 100
    await within(5000, async () => (await create(client, token, id++)).status === 200)
    assert.equal(service.child.exitCode, null, 'the service is still running')
  })
})
