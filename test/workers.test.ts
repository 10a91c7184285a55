import assert from 'node:assert/strict'
import { request } from 'node:http'
import { connect, type Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import {
  createTestDatabase,
  holdPlantsLock,
  insertsRunning,
  type TestDatabase,
} from './helpers/database.ts'
import { startOtlpReceiver } from './helpers/otlp-receiver.ts'
import { type ServiceProcess, startServiceProcess, tokenFor } from './helpers/process.ts'
import { createRequest, exchange, openSocket } from './helpers/raw-http.ts'
import { uniqueId } from './helpers/server.ts'
import { sleep, within } from './helpers/wait.ts'

// WORKERS=2: a primary and two node:cluster workers sharing one port. Every request below goes
// on a new connection, which the primary hands to the workers in turn.

type Answer = { status: number; body: string; worker: unknown }

/**
 * The worker that answered the request `requestId`, from its log line (a worker writes it at the
 * end of the event-loop turn that answered, so it may follow the answer by a moment).
 */
async function workerOf(service: ServiceProcess, requestId: string): Promise<unknown> {
  await within(2000, async () => service.lines.some((l) => l.requestId === requestId))
  return service.lines.find((l) => l.requestId === requestId)?.worker
}

/** POST /plants on a connection of its own; which worker answered, from the service's log. */
function post(service: ServiceProcess, token: string, id: number, name = 'worker fern') {
  const requestId = `workers-${id}`
  return new Promise<Answer>((resolve, reject) => {
    const body = JSON.stringify({ id, name })
    const req = request(
      `${service.base}/plants`,
      {
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          'x-request-id': requestId,
        },
      },
      (res) => {
        let text = ''
        res.on('data', (c: Buffer) => {
          text += c.toString()
        })
        res.on('end', () => {
          workerOf(service, requestId).then(
            (worker) => resolve({ status: res.statusCode ?? 0, body: text, worker }),
            reject,
          )
        })
      },
    )
    req.setTimeout(15_000, () => req.destroy(new Error(`no answer to ${requestId} within 15 s`)))
    req.on('error', reject)
    req.end(body)
  })
}

/** How one create on a connection of its own ended: a status, a reset, or no end within 15 s. */
type Ending = { sentAt: number; endedAt: number; outcome: number | 'reset' | 'hung' }

function createOnce(base: string, token: string, id: number): Promise<Ending> {
  const sentAt = performance.now()
  return new Promise<Ending>((resolve) => {
    const end = (outcome: Ending['outcome']) =>
      resolve({ sentAt, endedAt: performance.now(), outcome })
    const req = request(
      `${base}/plants`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      },
      (res) => {
        res.resume()
        res.on('end', () => end(res.statusCode ?? 0))
        res.on('error', () => end('reset'))
      },
    )
    req.setTimeout(15_000, () => {
      end('hung')
      req.destroy()
    })
    req.on('error', () => end('reset'))
    req.end(JSON.stringify({ id, name: 'worker death' }))
  })
}

/**
 * Creates, 8 at a time on connections of their own, until each worker in `workers` has answered
 * one (at most 400): each worker accepts its own connections, so which one answers is the
 * kernel's choice, and only concurrent connections are sure to reach both.
 */
async function postUntilEach(
  service: ServiceProcess,
  token: string,
  workers: readonly number[],
): Promise<Answer[]> {
  const answers: Answer[] = []
  const seen = () => workers.every((w) => answers.some((a) => a.worker === w))
  while (!seen() && answers.length < 400)
    answers.push(
      ...(await Promise.all(Array.from({ length: 8 }, () => post(service, token, uniqueId())))),
    )
  assert.ok(seen(), `workers ${workers} did not all answer in ${answers.length} creates`)
  return answers
}

/**
 * Kept-alive connections, `each` per worker in `workers`, each known by the worker that answered
 * a GET /healthz on it (opened 4 at a time, at most 400); the others are closed.
 */
async function connectionsOfEach(
  service: ServiceProcess,
  workers: readonly number[],
  each: number,
): Promise<{ socket: Socket; worker: number }[]> {
  const kept: { socket: Socket; worker: number }[] = []
  const count = (w: number) => kept.filter((k) => k.worker === w).length
  for (let opened = 0; workers.some((w) => count(w) < each); opened += 4) {
    assert.ok(opened < 400, `workers ${workers} did not each take ${each} of ${opened} connections`)
    const round = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const socket = await openSocket(service.base)
        after(() => socket.destroy())
        const requestId = `owner-${uniqueId()}`
        const answer = await exchange(
          socket,
          `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: ${requestId}\r\n\r\n`,
        )
        assert.equal(answer.status, 200)
        return { socket, worker: Number(await workerOf(service, requestId)) }
      }),
    )
    for (const r of round) {
      if (workers.includes(r.worker) && count(r.worker) < each) kept.push(r)
      else r.socket.destroy()
    }
  }
  return kept
}

/**
 * A new token that every worker knows. `tokenFor` waits for one answer that is not 401, on a
 * kept-alive connection, so from one worker; the other hears of the token on its own `LISTEN`, a
 * moment later (later still with a core kept busy). Here 20 creates in a row, each on a new
 * connection and so on either worker, are not 401.
 */
async function tokenForEveryWorker(
  db: TestDatabase,
  service: ServiceProcess,
  name: string,
  expiresAt?: Date,
): Promise<string> {
  const token = await tokenFor(db.sql, service.base, name, expiresAt)
  let inARow = 0
  await within(10_000, async () => {
    const { outcome } = await createOnce(service.base, token, uniqueId())
    inARow = outcome === 401 ? 0 : inARow + 1
    return inARow >= 20
  })
  return token
}

async function startWorkers(db: TestDatabase): Promise<ServiceProcess> {
  return startServiceProcess('node', { DATABASE_URL: db.url, WORKERS: '2' }, { after })
}

describe('WORKERS=2', () => {
  test('two workers share the port, each with its own pool and LISTEN; /metrics adds up both', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const token = await tokenForEveryWorker(db, service, `workers-${uniqueId()}`)
    const answers = await postUntilEach(service, token, [1, 2])
    assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]))
    assert.deepEqual(new Set(answers.map((a) => a.worker)), new Set([1, 2]))

    // Each worker's token cache holds its own LISTEN, on a connection of its own pool.
    const [listening] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and query ilike 'listen%'`
    assert.equal(listening?.n, 2)

    // Any worker answers /metrics with the sum of both (the primary asks each of them).
    const created = await db.sql<{ n: number }[]>`select count(*)::int as n from plants`
    for (let i = 0; i < 4; i++) {
      const text = await (
        await fetch(`${service.base}/metrics`, { headers: { connection: 'close' } })
      ).text()
      assert.match(
        text,
        new RegExp(`^plant_store_creates_total\\{outcome="created"\\} ${created[0]?.n}$`, 'm'),
      )
      assert.match(text, /^plant_store_build_info\{[^}]*\} 1$/m)
      // Both workers hold the same two tokens (the test's and none other): not added up.
      assert.match(text, /^plant_store_token_cache_tokens 1$/m)
    }
    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
  })

  test('with an OTLP endpoint each worker exports its own spans: every request span arrives, from two service instances, and /metrics adds up what they exported', async () => {
    const db = await createTestDatabase({ after })
    const receiver = await startOtlpReceiver({ after })
    const service = await startServiceProcess(
      'node',
      {
        DATABASE_URL: db.url,
        WORKERS: '2',
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_BSP_SCHEDULE_DELAY: '50',
      },
      { after },
    )
    const token = await tokenForEveryWorker(db, service, `workers-${uniqueId()}`)
    const answers = await postUntilEach(service, token, [1, 2])
    assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]))
    const spanIds = service.lines
      .filter((l) => l.message === 'request' && String(l.requestId).startsWith('workers-'))
      .map((l) => String(l.spanId))
    assert.ok(spanIds.length >= answers.length)
    await within(10_000, async () => {
      const received = new Set(receiver.spans().map((s) => s.spanId))
      return spanIds.every((id) => received.has(id))
    })
    const instances = new Set(
      receiver
        .spans()
        .filter((s) => spanIds.includes(s.spanId))
        .map((s) => s.resource['service.instance.id']),
    )
    assert.equal(instances.size, 2, 'one service instance per worker')
    const text = await (await fetch(`${service.base}/metrics`)).text()
    const exported = Number(/^plant_store_spans_exported_total (\d+)$/m.exec(text)?.[1])
    assert.ok(exported >= spanIds.length, `spans exported, both workers: ${exported}`)
    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
  })

  test('a revocation reaches every worker within 1 s', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const name = `revoked-${uniqueId()}`
    const token = await tokenForEveryWorker(db, service, name)
    // Both workers have verified (and cached) the token.
    const before = await postUntilEach(service, token, [1, 2])
    assert.deepEqual(new Set(before.map((a) => a.status)), new Set([200]))
    assert.deepEqual(new Set(before.map((a) => a.worker)), new Set([1, 2]))

    await db.sql`update api_tokens set revoked_at = now() where name = ${name}`
    await sleep(1000)
    const afterwards = await postUntilEach(service, token, [1, 2])
    assert.deepEqual(new Set(afterwards.map((a) => a.status)), new Set([401]))
    assert.deepEqual(new Set(afterwards.map((a) => a.worker)), new Set([1, 2]))
  })

  test('every worker refuses a token within 1 s of its expiry', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const expiresAt = new Date(Date.now() + 4000)
    const token = await tokenForEveryWorker(db, service, `expiring-${uniqueId()}`, expiresAt)
    const before = await postUntilEach(service, token, [1, 2])
    assert.deepEqual(new Set(before.map((a) => a.status)), new Set([200]))
    // No change to api_tokens at expiry: each worker judges it by its own clock.
    await sleep(expiresAt.getTime() + 1000 - Date.now())
    const afterwards = await postUntilEach(service, token, [1, 2])
    assert.deepEqual(new Set(afterwards.map((a) => a.status)), new Set([401]))
  })

  test('a worker killed with SIGKILL is logged and replaced; the other keeps answering', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const token = await tokenForEveryWorker(db, service, `kill-${uniqueId()}`)
    const ready = service.lines.filter((l) => String(l.message).startsWith('worker ready'))
    const victim = ready.find((l) => l.worker === 1)
    assert.ok(victim, JSON.stringify(ready))
    process.kill(Number(victim.pid), 'SIGKILL')

    // Once the primary has seen the death, the other worker answers every create meanwhile.
    const died = (l: Record<string, unknown>) =>
      l.message === 'a worker exited; starting a new one' && l.worker === 1
    await within(5000, () => service.lines.some(died))
    assert.equal((await post(service, token, uniqueId())).status, 200)
    // A new worker is a whole process start (tsx, the modules, its connections, the warm-up):
    // about 1.3 s of CPU, and past 5 s once in CI beside four other files starting processes.
    await within(20_000, () =>
      service.lines.some(
        (l) => l.message === 'a new worker replaces the one that exited' && l.replaced === 1,
      ),
    )
    const death = service.lines.find(died)
    assert.equal(death?.level, 'error')
    assert.equal(death?.signal, 'SIGKILL')
    const answers = await postUntilEach(service, token, [2, 3])
    assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]))
    assert.deepEqual(new Set(answers.map((a) => a.worker)), new Set([2, 3]))
    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
  })

  test('a worker killed with SIGKILL under load, each create on a new connection: every request ends at once, answered or reset, none left open; the other worker answers on; the primary replaces it', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const token = await tokenForEveryWorker(db, service, `death-${uniqueId()}`)
    const endings: Ending[] = []
    let running = true
    const loops = Array.from({ length: 8 }, async () => {
      while (running) endings.push(await createOnce(service.base, token, uniqueId()))
    })
    const answeredSince = (from: number) =>
      endings.slice(from).filter((e) => e.outcome === 200).length
    await within(10_000, () => answeredSince(0) >= 100)
    const kills: number[] = []
    // Each kill is of a worker that is busy: the first two, then their replacements.
    for (const id of [1, 2]) {
      const line = service.lines.find(
        (l) => l.worker === id && String(l.message).startsWith('worker ready'),
      )
      assert.ok(line, `no worker ${id}`)
      kills.push(performance.now())
      process.kill(Number(line.pid), 'SIGKILL')
      await within(10_000, () =>
        service.lines.some(
          (l) => l.message === 'a new worker replaces the one that exited' && l.replaced === id,
        ),
      )
      // Load on the new worker before the next kill.
      const mark = endings.length
      await within(10_000, () => answeredSince(mark) >= 100)
    }
    running = false
    await Promise.all(loops)
    const tally = (es: Ending[]) =>
      JSON.stringify(
        es.reduce<Record<string, number>>((acc, e) => {
          acc[e.outcome] = (acc[e.outcome] ?? 0) + 1
          return acc
        }, {}),
      )
    const summary = `${endings.length} creates: ${tally(endings)}; slowest ${Math.round(Math.max(...endings.map((e) => e.endedAt - e.sentAt)))} ms`
    process.stderr.write(`# worker deaths: ${summary}\n`)
    for (const e of endings.filter((x) => x.outcome === 'hung'))
      process.stderr.write(
        `# hung: sent ${kills.map((k) => Math.round(e.sentAt - k)).join(' / ')} ms after the kills\n`,
      )
    assert.deepEqual(
      endings.filter((e) => e.outcome === 'hung'),
      [],
      summary,
    )
    // A reset comes at once (the worker's connections close with it), never after a wait.
    for (const e of endings.filter((x) => x.outcome === 'reset'))
      assert.ok(e.endedAt - e.sentAt < 2000, `a reset after ${Math.round(e.endedAt - e.sentAt)} ms`)
    // Nothing but 200 otherwise: the surviving worker's creates are untouched.
    assert.deepEqual(
      [...new Set(endings.map((e) => e.outcome))].filter((o) => o !== 200 && o !== 'reset'),
      [],
      summary,
    )
    // Creates go on between the kills.
    for (const at of kills)
      assert.ok(
        endings.some((e) => e.outcome === 200 && e.sentAt > at && e.sentAt < at + 1000),
        summary,
      )
    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
  })

  test('SIGTERM drains every worker: creates in flight on both complete, then exit 0', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const token = await tokenForEveryWorker(db, service, `drain-${uniqueId()}`)
    // Which worker owns a connection is the kernel's choice: keep 5 connections of each, known by
    // the worker that answered a first request on them, so that both have creates in flight.
    const owned = await connectionsOfEach(service, [1, 2], 5)
    const ids = owned.map(() => uniqueId())
    // A lock held by the test keeps every create in flight past the signal.
    const unlock = await holdPlantsLock(db.sql)
    const sent = owned.map(({ socket }, i) => {
      const body = JSON.stringify({ id: ids[i], name: `drained ${ids[i]}` })
      return exchange(
        socket,
        createRequest(body, `Authorization: Bearer ${token}\r\nX-Request-Id: drain-${ids[i]}\r\n`),
      )
    })
    // Each worker's batch waits on the lock in a session of its own.
    await within(5000, async () => (await insertsRunning(db.sql, 'Lock')) >= 2)
    service.child.kill('SIGTERM')
    await sleep(500)
    await unlock()
    const answers = await Promise.all(sent)
    assert.deepEqual(
      answers.map((a) => a.status),
      Array(owned.length).fill(200),
    )
    assert.deepEqual(
      await Promise.all(ids.map((id) => workerOf(service, `drain-${id}`))),
      owned.map((o) => o.worker),
    )
    assert.equal(await service.exited, 0)
    const stopped = service.lines.filter((l) => l.message === 'stopped')
    assert.deepEqual(new Set(stopped.map((l) => l.worker)), new Set([1, 2, undefined]))
    const [row] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from plants where id = any(${ids.map(String)}::int8[])`
    assert.equal(row?.n, ids.length)
  })

  test('four unread connections flooding /metrics: the primary aggregates for all at once, /healthz and creates answer, no 500', async () => {
    const db = await createTestDatabase({ after })
    const service = await startWorkers(db)
    const token = await tokenForEveryWorker(db, service, `flood-${uniqueId()}`)
    const { hostname, port } = new URL(service.base)
    const sockets = await Promise.all(
      Array.from(
        { length: 4 },
        () =>
          new Promise<Socket>((resolve, reject) => {
            const socket = connect(Number(port), hostname, () => resolve(socket))
            socket.once('error', reject)
          }),
      ),
    )
    after(() => {
      for (const socket of sockets) socket.destroy()
    })
    for (const socket of sockets) {
      socket.on('error', () => {})
      socket.pause()
      socket.write('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(2000))
    }
    const started = performance.now()
    const health = await fetch(`${service.base}/healthz`)
    assert.equal(health.status, 200)
    await health.arrayBuffer()
    assert.equal((await post(service, token, uniqueId())).status, 200)
    const took = performance.now() - started
    assert.ok(took < 3000, `took ${took} ms`)
    for (const socket of sockets) socket.resume()
    await sleep(500)
    assert.deepEqual(
      service.lines.filter((l) => typeof l.status === 'number' && l.status >= 500),
      [],
    )
  })
})
