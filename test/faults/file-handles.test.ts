import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import type { Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { createTestDatabase } from '../helpers/database.ts'
import { startServiceProcess, tokenFor } from '../helpers/process.ts'
import { openSocket } from '../helpers/raw-http.ts'
import { within } from '../helpers/wait.ts'

// README, Limits: out of file handles (EMFILE) opening a database connection is 503 / 50301 with
// Retry-After: 1, never 500, and the service recovers once handles are free again.

type Answer = { status: number; retryAfter: string | undefined; body: string }

/** A create on `socket`, kept alive: writes the request and reads one whole answer. */
function create(socket: Socket, token: string, id: number): Promise<Answer> {
  const body = JSON.stringify({ id, name: 'handles' })
  return new Promise((resolve, reject) => {
    let got = Buffer.alloc(0)
    const onData = (chunk: Buffer) => {
      got = Buffer.concat([got, chunk])
      const text = got.toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      if (end < 0) return
      const head = text.slice(0, end)
      const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0)
      if (got.length < end + 4 + length) return
      socket.off('data', onData)
      socket.off('close', onClose)
      resolve({
        status: Number(head.split(' ')[1]),
        retryAfter: /\r\nretry-after: (\S+)/i.exec(head)?.[1],
        body: got.subarray(end + 4, end + 4 + length).toString('utf8'),
      })
    }
    const onClose = () => reject(new Error(`the connection closed; read: ${got.toString()}`))
    socket.on('data', onData)
    socket.once('close', onClose)
    socket.write(
      `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    )
  })
}

describe('out of file handles', () => {
  test('a service out of file handles when it must reconnect answers 503 with Retry-After: 1, never 500, and 200 again once handles are free', async () => {
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
    assert.equal((await create(client, token, 1)).status, 200)

    // The process may open 8 more files; connections of our own take them.
    const handles = () => readdirSync(`/proc/${pid}/fd`).length
    const limit = handles() + 8
    const set = spawnSync('prlimit', [`--pid=${pid}`, `--nofile=${limit}:${limit}`])
    assert.equal(set.status, 0, set.stderr?.toString())
    const flood: Socket[] = []
    after(() => {
      for (const s of flood) s.destroy()
    })
    for (let i = 0; i < 40; i++) flood.push(await openSocket(service.base))
    await within(5000, async () => handles() >= limit)

    // The database ends the service's sessions, which frees their handles; connections of our
    // own take those too, so every connection the service opens again meets EMFILE. A session's
    // end may reach the service late (through a container's proxy, say) and free a handle after
    // our connections took the others: so ours are added until the service has held none free
    // for half a second. (Its statement slots connect only for a create; its LISTEN session
    // reconnects at once, and may take a handle before ours do: it carries no create.)
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
      for (let i = 0; i < 40 && handles() < limit; i++) flood.push(await openSocket(service.base))
      for (let waited = 0; waited < 500; waited += 50) {
        if (handles() < limit) return false
        await new Promise((r) => setTimeout(r, 50))
      }
      return true
    })
    const answers: Answer[] = []
    for (let id = 2; id < 8; id++) answers.push(await create(client, token, id))
    assert.deepEqual(
      answers.filter((a) => a.status !== 503),
      [],
      'every create while out of handles is 503',
    )
    assert.ok(answers.every((a) => a.retryAfter === '1' && a.body.includes('50301')))
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
