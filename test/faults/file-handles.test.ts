import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import type { Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { limits } from '../../src/limits.ts'
import { createTestDatabase } from '../helpers/database.ts'
import { socketsTo, startServiceProcess, tokenFor } from '../helpers/process.ts'
import { createRequest, exchange, openSocket } from '../helpers/raw-http.ts'
import { sleep, within } from '../helpers/wait.ts'

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

    // The process may open 8 more files; connections of our own take them. A file it opens gets
    // the lowest free number, and fails (EMFILE) only when every number below the limit is taken:
    // with a file open above the limit (the process has one), a count of open files at the
    // limit can leave a number below it free.
    const handles = () => readdirSync(`/proc/${pid}/fd`).map(Number)
    const limit = handles().length + 8
    const free = () => {
      const open = new Set(handles())
      let n = 0
      for (let fd = 0; fd < limit; fd++) if (!open.has(fd)) n++
      return n
    }
    const set = spawnSync('prlimit', [`--pid=${pid}`, `--nofile=${limit}:${limit}`])
    assert.equal(set.status, 0, set.stderr?.toString())
    const flood: Socket[] = []
    after(() => {
      for (const s of flood) s.destroy()
    })
    for (let i = 0; i < 40; i++) flood.push(await openSocket(service.base))
    await within(5000, async () => free() === 0)

    // The database ends the service's sessions, which frees their handles; connections of our
    // own take those too, so every connection the service opens again meets EMFILE. A session's
    // end may reach the service late (through a container's proxy, say) and free a handle after
    // our connections took the others: so ours are added until every socket the service held to
    // the database (noted here, by inode) is closed and it has held no handle free for half a
    // second. Half a second alone is no proof on a busy machine: a socket closed only when a
    // create meets it frees a handle for that create's new connection, which then stores it.
    // (Its statement slots connect only for a create; its LISTEN session reconnects at once,
    // and may take a handle before ours do: it carries no create.)
    const databasePort = Number(new URL(db.url).port || 5432)
    const toDatabase = socketsTo(pid, databasePort, { anyState: true })
    assert.ok(toDatabase.size > 0, 'the service holds connections to the database')
    const ended = await db.sql<{ pid: number }[]>`
      select pid, pg_terminate_backend(pid) from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid()`
    await within(5000, async () => {
      const [left] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where pid = any(${ended.map((r) => r.pid)}::int[])`
      return left?.n === 0
    })
    await within(10_000, async () => {
      for (let i = 0; i < 40 && free() > 0; i++) flood.push(await openSocket(service.base))
      const open = socketsTo(pid, databasePort, { anyState: true })
      if ([...toDatabase].some((inode) => open.has(inode))) return false
      for (let waited = 0; waited < 500; waited += 50) {
        if (free() > 0) return false
        await sleep(50)
      }
      return true
    })
    // The creates are held for their whole deadline, sent at once on two connections; a handle
    // freed meanwhile is taken again at once, so that none reaches them. The service closes a
    // connection on which nothing moved for 10 s, or idle 5 s after an answer: on a busy machine
    // the set-up above can take long enough for that, so each of ours asks for /healthz every
    // 2 s (an answer opens no file), and the two that carry the creates just before them.
    // (A connection the service has not accepted yet gets no answer: a ping waits 1 s at most.)
    const ping = (socket: Socket) =>
      Promise.race([
        exchange(socket, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n').catch(() => undefined),
        sleep(1000),
      ])
    let cornering = true
    const keepCornered = (async () => {
      let pinged = performance.now()
      while (cornering) {
        for (let i = 0; i < 40 && free() > 0; i++) {
          const socket = await openSocket(service.base).catch(() => undefined)
          if (socket) flood.push(socket)
        }
        if (performance.now() - pinged > 2000) {
          pinged = performance.now()
          // Not awaited: the loop goes on taking freed handles meanwhile.
          for (const socket of flood) void ping(socket)
        }
        await sleep(2)
      }
    })()
    await Promise.all([client, second].map(ping))
    const timed = async (socket: Socket, id: number) => {
      const started = performance.now()
      const answer = await create(socket, token, id)
      return { answer, ms: performance.now() - started }
    }
    const both = await Promise.all([timed(client, 2), timed(second, 3)])
    const answers = both.map((b) => b.answer)
    const took = both.map((b) => b.ms)
    cornering = false
    await keepCornered
    // What a failure needs to be understood (it has failed now and then in whole runs, the
    // creates stored after about 1.5 s held, cause not yet found): when each answer came, the
    // service's sockets to the database now, its free handles, and what it logged but requests.
    const said = () =>
      JSON.stringify({
        took: took.map(Math.round),
        toDatabaseNow: [...socketsTo(pid, databasePort, { anyState: true })],
        endedSockets: [...toDatabase],
        free: free(),
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

    // Handles free again: creates succeed within 5 s.
    for (const s of flood) s.destroy()
    let id = 100
    await within(5000, async () => (await create(client, token, id++)).status === 200)
    assert.equal(service.child.exitCode, null, 'the service is still running')
  })
})
