import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { startEmbedded } from '../src/db/start/embedded.ts'
import { migrate } from '../src/db/start/migrate.ts'
import { limits } from '../src/limits.ts'
import { createTestDatabase, quietLog } from './helpers/database.ts'
import { bodyOf, type Drive, driveCreates } from './helpers/drive.ts'
import { startServiceProcess, tokenFor } from './helpers/process.ts'
import { createRequest, exchange, openSocket } from './helpers/raw-http.ts'
import { tempDir } from './helpers/temp-dir.ts'
import { sleep, within } from './helpers/wait.ts'

// A create's objects are young garbage once it is answered. Objects that outlive two
// young-generation collections are promoted, and then wait for a full collection: about 300
// bytes a create made the collections twice as long and brought a full one every few seconds
// (BENCHMARKS.md, "What survives a scavenge"), where the bare node:http server promotes none.
// Twice it came from one line of the create path: two object spreads per request, and a `Set`
// of the statements in flight (about 200 bytes a create; it showed only with thousands of
// creates a second arriving one by one, each in a statement of its own, on a server whose
// commits are flushed, after the full warm-up). This counts what the service's collections
// promote, from V8's own trace, under both kinds of load.

/**
 * Creates sent at a steady pace whatever the answers (an open loop, as a service's many clients
 * send them): `perSecond` at even intervals, each on the connection that has waited longest
 * since its last answer, of `connections` kept alive (as a load generator spreads them), so that
 * most creates arrive alone and go in a statement of their own. A create due while every
 * connection awaits an answer is not sent.
 */
async function paceCreates(base: string, token: string, perSecond: number, connections: number) {
  const prefix = BigInt(Date.now()) * 1_000_000n + BigInt(process.pid % 1000) * 1000n
  const authorization = `Authorization: Bearer ${token}\r\n`
  let sequence = 0
  let acknowledged = 0
  let other = 0
  let inFlight = 0
  const sockets = await Promise.all(Array.from({ length: connections }, () => openSocket(base)))
  const free = [...sockets]
  // Sent one by one at even intervals: a timer fires at most once a millisecond, and creates
  // sent together arrive together and go in one statement; so this turn of the event loop
  // sleeps (Atomics.wait, without spinning) until the next create is due, sends what is due,
  // and lets the loop read the answers before the next turn.
  const gapMs = 1000 / perSecond
  const asleep = new Int32Array(new SharedArrayBuffer(4))
  let running = true
  let due = performance.now()
  const turn = () => {
    if (!running) return
    const wait = due - performance.now()
    if (wait > 0) Atomics.wait(asleep, 0, 0, wait)
    for (const now = performance.now(); due <= now; due += gapMs) {
      const socket = free.shift()
      if (socket === undefined) continue
      const id = String(prefix + BigInt(++sequence))
      inFlight++
      exchange(socket, createRequest(bodyOf({ id, name: `paced ${id}`, tag: null }), authorization))
        .then(
          ({ status }) => {
            if (status === 200) acknowledged++
            else other++
            free.push(socket)
          },
          () => {
            other++
          },
        )
        .finally(() => {
          inFlight--
        })
    }
    setImmediate(turn)
  }
  setImmediate(turn)
  return {
    acknowledged: () => acknowledged,
    other: () => other,
    stop: async () => {
      running = false
      await within(10_000, () => inFlight === 0)
      for (const socket of sockets) socket.destroy()
    },
  }
}

/**
 * A PostgreSQL of the test's own whose commits are flushed to the disk (the suite's server runs
 * with fsync off): each statement then takes as long as on a real server, and the creates that
 * arrive one by one go in statements of their own.
 */
async function flushingDatabase(): Promise<{ url: string; sql: postgres.Sql }> {
  const { dir, ...tmp } = await tempDir({ after }, 'plant-store-request-gc-')
  const db = await startEmbedded({ dir, log: quietLog, shareRunning: false, fast: false })
  tmp.after(() => db.stop())
  await migrate(db.url, quietLog)
  const sql = postgres(db.url, { max: 2, onnotice: () => {} })
  tmp.after(() => sql.end())
  return { url: db.url, sql }
}

describe('the objects of a create, in the service as npm start runs it, against a real PostgreSQL', () => {
  const loads: {
    name: string
    /** Commits flushed to the disk (fsync on), as in production, or not (the suite's server). */
    flushed: boolean
    start: (
      base: string,
      token: string,
    ) => Promise<{ count: () => number; stop: () => Promise<void> }>
  }[] = [
    {
      name: 'flat out from 8 clients',
      flushed: false,
      start: async (base, token) => {
        const drive: Drive = driveCreates(base, token, { concurrency: 8, pauseMs: 0 })
        return { count: () => drive.acknowledged.length, stop: drive.stop }
      },
    },
    {
      name: 'paced, 3,000 creates a second one by one over 256 connections, commits flushed',
      flushed: true,
      start: async (base, token) => {
        const pace = await paceCreates(base, token, 3000, 256)
        return {
          count: () => pace.acknowledged(),
          stop: async () => {
            await pace.stop()
            assert.equal(pace.other(), 0, 'every paced create answered 200')
          },
        }
      },
    },
  ]
  for (const load of loads)
    test(`under steady load (${load.name}) the service promotes under 64 bytes a create to the old generation`, async () => {
      const db = load.flushed ? await flushingDatabase() : await createTestDatabase({ after })
      // Standard output carries the log and V8's trace of each collection; each scavenge's line
      // is kept if it came while the counted creates ran. The warm-up is npm start's own.
      let counting = false
      const promoted: number[] = []
      const { base } = await startServiceProcess(
        'node',
        { DATABASE_URL: db.url, WARM_UP_CREATES: String(limits.warmUp.creates) },
        { after },
        {
          nodeFlags: ['--trace-gc-nvp'],
          otherLine: (line) => {
            if (counting && / gc=s /.test(line))
              promoted.push(Number(/ promoted=(\d+)/.exec(line)?.[1] ?? Number.NaN))
          },
        },
      )
      const token = await tokenFor(db.sql, base, 'gc')
      const running = await load.start(base, token)
      after(() => running.stop())
      // Past the first creates (code still being optimised), 6 s counted.
      await within(15_000, () => running.count() >= 2000)
      counting = true
      const from = running.count()
      await sleep(6000)
      counting = false
      const creates = running.count() - from
      await running.stop()
      assert.ok(
        promoted.length >= 3,
        `only ${promoted.length} scavenges in 6 s of ${creates} creates`,
      )
      assert.ok(
        promoted.every((n) => Number.isFinite(n)),
        'each scavenge line says what it promoted',
      )
      const perCreate = promoted.reduce((a, b) => a + b, 0) / creates
      assert.ok(
        perCreate < 64,
        `${perCreate.toFixed(0)} bytes promoted a create (${promoted.length} scavenges, ${creates} creates)`,
      )
    })
})
