import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { startEmbedded } from '../src/db/start/embedded.ts'
import { migrate } from '../src/db/start/migrate.ts'
import { limits } from '../src/limits.ts'
import { seedEmbedded } from './helpers/cluster-cache.ts'
import { createTestDatabase, quietLog } from './helpers/database.ts'
import { bodyOf, type Drive, driveCreates } from './helpers/drive.ts'
import { startServiceProcess, tokenFor } from './helpers/process.ts'
import { createRequest, exchange, openSocket } from './helpers/raw-http.ts'
import { diskTempDir, tempDir } from './helpers/temp-dir.ts'
import { sleep, within } from './helpers/wait.ts'

// A create's objects are young garbage once it is answered. Objects that outlive two
// young-generation collections are promoted, and then wait for a full collection: about 300
// bytes a create made the collections twice as long and brought a full one every few seconds
// (BENCHMARKS.md, "What survives a scavenge"), where the bare node:http server promotes none.
// Twice it came from one line of the create path: two object spreads per request, and a `Set`
// of the statements in flight (about 200 bytes a create; it showed only with thousands of
// creates a second arriving one by one, each in a statement of its own, on a server whose
// commits are flushed, after the full warm-up). This counts what the service's collections
// promote, from V8's own trace, under each kind of load, and how much the old generation grew:
// V8 also makes objects there directly, as the new table of a Map or Set whose table is already
// there, each time it empties (about 170 bytes a statement from a Map of the slots' start times,
// which brought a full collection every minute or two at 10 % of the peak: BENCHMARKS.md, "A
// Map emptied at each statement").

/**
 * Creates sent at a steady pace whatever the answers (an open loop, as a service's many clients
 * send them): `perSecond` at even intervals, each on the connection that has waited longest
 * since its last answer, of `connections` kept alive (as a load generator spreads them), so that
 * most creates arrive alone and go in a statement of their own. A create due while every
 * connection awaits an answer is not sent. `waitsSince(since)` is how long each create answered
 * after `since` waited for its answer, and each still waiting so far.
 */
async function paceCreates(base: string, token: string, perSecond: number, connections: number) {
  const prefix = BigInt(Date.now()) * 1_000_000n + BigInt(process.pid % 1000) * 1000n
  const authorization = `Authorization: Bearer ${token}\r\n`
  let sequence = 0
  let acknowledged = 0
  let other = 0
  let inFlight = 0
  // When each create awaiting its answer was sent, and each answered create's wait and answer.
  const sentAt = new Map<number, number>()
  const answered: { at: number; ms: number }[] = []
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
      const n = ++sequence
      const id = String(prefix + BigInt(n))
      inFlight++
      sentAt.set(n, performance.now())
      exchange(socket, createRequest(bodyOf({ id, name: `paced ${id}`, tag: null }), authorization))
        .then(
          ({ status }) => {
            const at = performance.now()
            answered.push({ at, ms: at - (sentAt.get(n) ?? at) })
            if (status === 200) acknowledged++
            else other++
            free.push(socket)
          },
          () => {
            other++
          },
        )
        .finally(() => {
          sentAt.delete(n)
          inFlight--
        })
    }
    setImmediate(turn)
  }
  setImmediate(turn)
  return {
    acknowledged: () => acknowledged,
    other: () => other,
    waitsSince: (since: number) => {
      const now = performance.now()
      const waits: number[] = []
      for (const sent of sentAt.values()) waits.push(now - sent)
      for (let i = answered.length - 1; i >= 0 && (answered[i]?.at ?? 0) >= since; i--)
        waits.push(answered[i]?.ms ?? 0)
      return waits
    },
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
  const { dir, ...tmp } = await tempDir({ after }, 'plant-store-request-gc-', diskTempDir())
  await seedEmbedded(dir)
  const db = await startEmbedded({ dir, log: quietLog, shareRunning: false, fast: false })
  tmp.after(() => db.stop())
  await migrate(db.url, quietLog)
  const sql = postgres(db.url, { max: 2, onnotice: () => {} })
  tmp.after(() => sql.end())
  return { url: db.url, sql }
}

/** A load of `paceCreates`, each create answered 200. */
const paced = (perSecond: number, connections: number) => async (base: string, token: string) => {
  const pace = await paceCreates(base, token, perSecond, connections)
  return {
    count: () => pace.acknowledged(),
    waitsSince: pace.waitsSince,
    stop: async () => {
      await pace.stop()
      assert.equal(pace.other(), 0, 'every paced create answered 200')
    },
  }
}

describe('the objects of a create, in the service as npm start runs it, against a real PostgreSQL', () => {
  const loads: {
    name: string
    /** Commits flushed to the disk (fsync on), as in production, or not (the suite's server). */
    flushed: boolean
    start: (
      base: string,
      token: string,
    ) => Promise<{
      count: () => number
      /** The waits for an answer since a moment (see paceCreates); none for a few clients. */
      waitsSince?: (since: number) => number[]
      stop: () => Promise<void>
    }>
  }[] = [
    {
      // Eight creates in flight at most: whatever they wait, what they hold is a few kilobytes.
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
      start: paced(3000, 256),
    },
    {
      // A statement for each create, and each alone in flight: the slots' bookkeeping empties at
      // each (the first two loads keep a statement in flight most of the time); 32 connections,
      // each waiting 32 ms between its creates, well within a scavenge's interval (a
      // connection's last request is freed once answered: test/request-freed.test.ts).
      name: 'paced, 1,000 creates a second one by one over 32 connections, commits flushed',
      flushed: true,
      start: paced(1000, 32),
    },
  ]
  // A create's own objects are promoted only if it waits for its answer through two collections:
  // with 256 creates in flight, a stall of the machine (a busy disk under flushed commits, a
  // starved core) promotes what they legitimately hold, a few hundred bytes a create over the
  // 6 s. So up to this many times 6 s are measured, each saying how many creates in it waited as
  // long as the collections came one after another, until one promotes under the bound.
  const windows = 5
  for (const load of loads)
    test(`under steady load (${load.name}) the service promotes under 64 bytes a create, and adds under 100 to the old generation`, async (t) => {
      const db = load.flushed ? await flushingDatabase() : await createTestDatabase({ after })
      // Standard output carries the log and V8's trace of each collection: when it came (ms since
      // the process started), in which isolate (the main thread's or a worker's), whether a
      // scavenge, and what it promoted. The warm-up is npm start's own.
      const collections: {
        isolate: string
        ms: number
        scavenge: boolean
        promoted: number
        /** After a scavenge, the heap less what stayed young: the old generation's size. */
        old: number
      }[] = []
      const { base } = await startServiceProcess(
        'node',
        { DATABASE_URL: db.url, WARM_UP_CREATES: String(limits.warmUp.creates) },
        { after },
        {
          nodeFlags: ['--trace-gc-nvp'],
          otherLine: (line) => {
            const at = /^\[\d+:([\w:]+)\] +(\d+) ms: pause=/.exec(line)
            if (at === null) return
            collections.push({
              isolate: at[1] ?? '',
              ms: Number(at[2]),
              scavenge: / gc=s /.test(line),
              promoted: Number(/ promoted=(\d+)/.exec(line)?.[1] ?? Number.NaN),
              // The heap's objects after the collection: `total_size_after` up to V8 12 (Node
              // 20, 22), `end_object_size` in V8 13 (Node 24), the same figure renamed.
              old:
                Number(
                  /(?: total_size_after| end_object_size)=(\d+)/.exec(line)?.[1] ?? Number.NaN,
                ) - Number(/ new_space_survived=(\d+)/.exec(line)?.[1] ?? Number.NaN),
            })
          },
        },
      )
      const token = await tokenFor(db.sql, base, 'gc')
      const running = await load.start(base, token)
      after(() => running.stop())
      // Past the first creates (code still being optimised), 6 s counted at a time.
      await within(15_000, () => running.count() >= 2000)
      const measured: string[] = []
      // The window under the bounds, or else the one whose old generation grew the least a create.
      let best:
        | { perCreate: number; grownPerCreate: number; scavenges: number[]; creates: number }
        | undefined
      for (let window = 1; window <= windows; window++) {
        const since = performance.now()
        const first = collections.length
        const from = running.count()
        await sleep(6000)
        const creates = running.count() - from
        const waits = running.waitsSince?.(since) ?? []
        // The collections in the 6 s, and each isolate's one before them (what it kept, the
        // first of them may promote): how close two came one after another in one isolate, and
        // what the old generation grew by from each scavenge to the isolate's next one (a full
        // collection between them starts it afresh): what the scavenges promoted, and what V8
        // made in the old generation directly, as a new table for a Map or Set whose old table
        // is there (about 170 bytes a statement for a Map emptied at each).
        const during = collections.slice(first)
        const previous = new Map<string, (typeof collections)[number]>()
        for (const c of collections.slice(0, first)) previous.set(c.isolate, c)
        let closest = Number.POSITIVE_INFINITY
        let grown = 0
        for (const c of during) {
          const before = previous.get(c.isolate)
          if (before !== undefined) {
            closest = Math.min(closest, c.ms - before.ms)
            if (before.scavenge && c.scavenge) grown += Math.max(0, c.old - before.old)
          }
          previous.set(c.isolate, c)
        }
        const scavenges = during.filter((c) => c.scavenge).map((c) => c.promoted)
        assert.ok(
          scavenges.every((n) => Number.isFinite(n)),
          'each scavenge line says what it promoted',
        )
        assert.ok(
          during.every((c) => !c.scavenge || Number.isFinite(c.old)),
          "each scavenge line says the heap's size after it and what stayed young",
        )
        const perCreate = scavenges.reduce((a, b) => a + b, 0) / creates
        const grownPerCreate = grown / creates
        const slow = waits.filter((ms) => ms >= closest).length
        const slowest = Math.max(0, ...waits)
        const figures = `${perCreate.toFixed(0)} bytes promoted a create, the old generation grown by ${grownPerCreate.toFixed(0)} (${scavenges.length} scavenges, ${creates} creates; ${slow} waited as long as the collections came, at least ${closest} ms apart; the slowest ${slowest.toFixed(0)} ms)`
        t.diagnostic(`6 s number ${window}: ${figures}`)
        measured.push(figures)
        // Waits can only add to what is promoted (a create's objects live as long as it
        // waits), never take from it: a window under the bound ends the search, whatever waited
        // in it. After one over it the next windows are tried (2026-12-02's machine: 229 and 249
        // bytes a create in one window of each of two CI runs, 6 to 16 in every other window
        // measured); the test fails only if every window is over, as an object the service kept
        // for each create would make them.
        const measuredWindow = { perCreate, grownPerCreate, scavenges, creates }
        if (perCreate < 64 && grownPerCreate < 100 && scavenges.length >= 3) {
          best = measuredWindow
          break
        }
        if (best === undefined || grownPerCreate < best.grownPerCreate) best = measuredWindow
        // What a stall's creates held is promoted by the next scavenges or two, in the next 6 s
        // if they start at once: 2 s to let it go first.
        await sleep(2000)
      }
      await running.stop()
      assert.ok(best, 'a window was measured')
      const { perCreate, grownPerCreate, scavenges, creates } = best
      assert.ok(
        scavenges.length >= 3,
        `only ${scavenges.length} scavenges in 6 s of ${creates} creates`,
      )
      assert.ok(
        perCreate < 64 && grownPerCreate < 100,
        `in none of ${windows} times 6 s under 64 bytes promoted a create and under 100 added to the old generation: ${measured.join('; ')}`,
      )
    })
})
