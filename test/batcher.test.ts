import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { DatabaseUnavailable } from '../src/outcome.ts'
import { createBatcher } from '../src/plants/batcher.ts'
import type { Settled } from '../src/plants/waiting.ts'
import { manualClock, settle } from './helpers/clock.ts'

// The batcher on its own: a queue in front of a statement function. Here the "statement" is a
// function that records its batches and finishes when the test releases it.

function gatedStore() {
  const batches: number[][] = []
  const gates: (() => void)[] = []
  const store = async (items: readonly number[]) => {
    batches.push([...items])
    await new Promise<void>((open) => gates.push(open))
    return items.map((i) => (i < 0 ? new Error(`item ${i} refused`) : i * 10))
  }
  const releaseAll = () => {
    for (const open of gates.splice(0)) open()
  }
  /** Lets the oldest statement still held end. */
  const releaseFirst = () => gates.shift()?.()
  return { batches, store, releaseAll, releaseFirst }
}

const tick = () => new Promise((done) => setImmediate(done))

/** An item's outcome in short: its value, an unavailable one's reason, or a fault's message. */
const short = (o: Settled<number>) =>
  typeof o === 'number'
    ? o
    : o.kind === 'unavailable'
      ? o.reason
      : `fault: ${o.error instanceof Error ? o.error.message : String(o.error)}`

describe('createBatcher', () => {
  test('items that arrive while the statements are in flight go together in the next one, each with its own outcome', async () => {
    const { batches, store, releaseAll } = gatedStore()
    const b = createBatcher(store, { maxBatch: 100, maxInFlight: 1, maxQueued: 1000 })
    const first = b.submit(1)
    await tick()
    const rest = [2, 3, 4].map((i) => b.submit(i))
    await tick()
    assert.deepEqual(batches, [[1]])
    assert.deepEqual(b.load().queued, 3)
    releaseAll()
    assert.equal(await first, 10)
    await settle()
    assert.deepEqual(batches, [[1], [2, 3, 4]])
    releaseAll()
    assert.deepEqual(await Promise.all(rest), [20, 30, 40])
  })

  test('a hook that throws after a statement committed changes no answer: each item gets its outcome, a lone item included, and the fault is reported', async () => {
    const faults: unknown[] = []
    const committed: number[][] = []
    const b = createBatcher(
      async (items: readonly number[]) => {
        committed.push([...items])
        return items.map((i) => i * 10)
      },
      { maxBatch: 100, maxInFlight: 1, maxQueued: 1000 },
      {
        statementRan: () => {
          throw new Error('a bug in a metrics hook')
        },
        through: () => {
          throw new Error('a bug in the gap tracker')
        },
        fault: (err) => faults.push(err),
      },
    )
    assert.equal(await b.submit(1), 10, 'a lone item: its row is stored, so it is created')
    assert.deepEqual(await Promise.all([2, 3].map((i) => b.submit(i))), [20, 30])
    assert.deepEqual(committed, [[1], [2, 3]], 'each sent once, never retried alone')
    assert.equal(faults.length, 2)
    assert.match(String(faults[0]), /a bug in the gap tracker/)
  })

  test('a hook that throws after a statement failed leaves no item unanswered: the batch is held and sent again, and the fault is reported', async () => {
    const faults: unknown[] = []
    let sends = 0
    const b = createBatcher(
      async (items: readonly number[]) => {
        if (sends++ === 0)
          throw Object.assign(new Error('cannot execute INSERT in a read-only transaction'), {
            code: '25006',
          })
        return items.map((i) => i * 10)
      },
      { maxBatch: 100, maxInFlight: 1, maxQueued: 1000 },
      {
        readOnly: () => {
          throw new Error('a bug in the read-only hook')
        },
        fault: (err) => faults.push(err),
      },
    )
    const all = [1, 2].map((i) => b.submit(i, performance.now() + 5000).then(short))
    assert.deepEqual(await Promise.all(all), [10, 20])
    assert.equal(sends, 2)
    assert.deepEqual(
      faults.map((f) => (f as Error).message),
      ['a bug in the read-only hook'],
    )
  })

  test('a batch holds at most maxBatch items, and at most maxInFlight statements run at once', async () => {
    const { batches, store, releaseAll } = gatedStore()
    const b = createBatcher(store, { maxBatch: 2, maxInFlight: 2, maxQueued: 1000 })
    const all = [1, 2, 3, 4, 5].map((i) => b.submit(i))
    await tick()
    assert.deepEqual(batches, [
      [1, 2],
      [3, 4],
    ])
    assert.equal(b.load().inFlight, 2)
    releaseAll()
    await tick()
    await tick()
    assert.deepEqual(batches, [[1, 2], [3, 4], [5]])
    releaseAll()
    assert.deepEqual(await Promise.all(all), [10, 20, 30, 40, 50])
  })

  test('with a statement in flight, the next goes as soon as as many items wait as it holds, not before', async () => {
    const { batches, store, releaseAll } = gatedStore()
    const b = createBatcher(store, { maxBatch: 100, maxInFlight: 2, maxQueued: 1000 })
    // Alone: an item goes at once, and one that comes while it runs goes beside it.
    const lone = [b.submit(1)]
    await tick()
    lone.push(b.submit(2))
    await tick()
    assert.deepEqual(batches, [[1], [2]])
    releaseAll()
    assert.deepEqual(await Promise.all(lone), [10, 20])
    await settle()
    // Three in flight: the second slot stays free while fewer wait.
    const first = [3, 4, 5].map((i) => b.submit(i))
    await tick()
    const next = [b.submit(6), b.submit(7)]
    await tick()
    assert.deepEqual(batches.slice(2), [[3, 4, 5]])
    assert.equal(b.load().inFlight, 1)
    assert.equal(b.load().queued, 2)
    next.push(b.submit(8))
    await tick()
    assert.deepEqual(batches.slice(2), [
      [3, 4, 5],
      [6, 7, 8],
    ])
    releaseAll()
    assert.deepEqual(await Promise.all([...first, ...next]), [30, 40, 50, 60, 70, 80])
  })

  test('a statement whose items all have their outcome hands its slot to the items waiting before they are answered', async () => {
    const { batches, store, releaseAll, releaseFirst } = gatedStore()
    const b = createBatcher(store, { maxBatch: 10, maxInFlight: 2, maxQueued: 10 })
    // What had been sent when the first item was answered.
    let sentWhenAnswered: number[][] = []
    const first = b.submit(1).then((o) => {
      sentWhenAnswered = batches.map((x) => [...x])
      return o
    })
    await tick()
    const second = b.submit(2)
    await tick()
    // Both slots busy: the third waits.
    const third = b.submit(3)
    await tick()
    assert.deepEqual(batches, [[1], [2]])
    releaseFirst()
    assert.equal(await first, 10)
    assert.deepEqual(sentWhenAnswered, [[1], [2], [3]])
    releaseAll()
    assert.deepEqual(await Promise.all([second, third]), [20, 30])
  })

  test('an Error among the outcomes fails its item alone', async () => {
    const { store, releaseAll } = gatedStore()
    const b = createBatcher(store, { maxBatch: 10, maxInFlight: 1, maxQueued: 10 })
    const all = [7, -1, 8].map((i) => b.submit(i).then(short))
    await tick()
    releaseAll()
    assert.deepEqual(await Promise.all(all), [70, 'fault: item -1 refused', 80])
  })

  test('past maxQueued waiting, a submit is refused at once as unavailable (queue_full)', async () => {
    const { store, releaseAll } = gatedStore()
    const b = createBatcher(store, { maxBatch: 1, maxInFlight: 1, maxQueued: 2 })
    const running = b.submit(1)
    await tick()
    const waiting = [b.submit(2), b.submit(3)]
    assert.equal(short(await b.submit(4)), 'queue_full')
    releaseAll()
    await running
    for (let i = 0; i < 4; i++) {
      await tick()
      releaseAll()
    }
    assert.deepEqual(await Promise.all(waiting), [20, 30])
  })

  test('an item still waiting at its deadline, or whose statement has not answered by then, is answered unavailable (deadline) at that moment, not before', async () => {
    const { store, releaseAll } = gatedStore()
    const { clock, advance } = manualClock()
    const b = createBatcher(store, { maxBatch: 1, maxInFlight: 1, maxQueued: 10 }, {}, clock)
    const soon = clock.now() + 50
    const answeredAt: number[] = []
    const reasons: unknown[] = []
    const watch = (p: Promise<Settled<number>>) =>
      p.then((o) => {
        answeredAt.push(clock.now())
        reasons.push(short(o))
      })
    const inFlight = watch(b.submit(1, soon))
    await advance(0)
    const queued = watch(b.submit(2, soon))
    await advance(49)
    assert.deepEqual(answeredAt, [], 'answered before the deadline')
    await advance(1)
    await Promise.all([inFlight, queued])
    assert.deepEqual(reasons, ['deadline', 'deadline'])
    assert.deepEqual(answeredAt, [soon, soon])
    releaseAll()
  })

  test('creates one after another set no timer each: one timer watches every deadline, one every statement for being stuck', async () => {
    const { clock, advance } = manualClock()
    let timersSet = 0
    const counting = {
      ...clock,
      after: (ms: number, run: () => void, background?: boolean) => {
        timersSet++
        return clock.after(ms, run, background)
      },
    }
    const store = async (items: readonly number[]) => items.map((i) => i * 10)
    const b = createBatcher(
      store,
      { maxBatch: 10, maxInFlight: 2, maxQueued: 10 },
      { stuckAfterMs: 1000 },
      counting,
    )
    for (let i = 1; i <= 100; i++) {
      assert.equal(await b.submit(i, clock.now() + 6000), i * 10)
      await advance(5)
    }
    assert.ok(timersSet <= 4, `${timersSet} timers set for 100 creates`)
  })

  test('a statement unanswered for stuckAfterMs is reported stuck at that moment, once, each slot by its own start', async () => {
    const { store, releaseAll } = gatedStore()
    const { clock, advance } = manualClock()
    const stuck: [number, number][] = []
    const b = createBatcher(
      store,
      { maxBatch: 1, maxInFlight: 2, maxQueued: 10 },
      { stuckAfterMs: 100, stuck: (slot) => stuck.push([slot, clock.now()]) },
      clock,
    )
    const reports = () => stuck.length
    const start = clock.now()
    const first = b.submit(1, start + 10_000)
    await advance(30)
    const second = b.submit(2, start + 10_000)
    await advance(69)
    assert.equal(reports(), 0, 'reported before stuckAfterMs')
    await advance(1)
    assert.equal(reports(), 1)
    await advance(29)
    assert.equal(reports(), 1)
    await advance(1)
    await advance(500)
    assert.deepEqual(
      stuck.map(([, at]) => at - start),
      [100, 130],
      'each statement reported once, at its own start + stuckAfterMs',
    )
    assert.notEqual(stuck[0]?.[0], stuck[1]?.[0], 'two slots')
    releaseAll()
    assert.deepEqual(await Promise.all([first, second]), [10, 20])
    const third = b.submit(3, clock.now() + 10_000)
    await advance(99)
    assert.equal(reports(), 2, 'a new statement on a slot that was stuck starts afresh')
    await advance(1)
    assert.equal(reports(), 3)
    releaseAll()
    assert.equal(await third, 30)
  })

  test('a statement unanswered for silentAfterMs is asked about every 250 ms, one question at a time, and reported stuck as soon as silent says so, once; a statement answered meanwhile is not', async () => {
    const { store, releaseAll } = gatedStore()
    const { clock, advance } = manualClock()
    const stuck: { slot: number; at: number; ms: number; unacknowledged: boolean }[] = []
    const asked: { slot: number; at: number; answer: (yes: boolean) => void }[] = []
    const b = createBatcher(
      store,
      { maxBatch: 1, maxInFlight: 1, maxQueued: 10 },
      {
        stuckAfterMs: 10_000,
        stuck: (slot, why) => stuck.push({ slot, at: clock.now(), ...why }),
        silentAfterMs: 1000,
        silent: (slot) =>
          new Promise<boolean>((answer) => asked.push({ slot, at: clock.now(), answer })),
      },
      clock,
    )
    const start = clock.now()
    const first = b.submit(1, start + 20_000)
    await advance(999)
    assert.equal(asked.length, 0, 'asked before silentAfterMs')
    await advance(1)
    assert.deepEqual(
      asked.map((a) => a.at - start),
      [1000],
    )
    await advance(500)
    assert.equal(asked.length, 1, 'asked again before the first answer')
    asked[0]?.answer(false)
    await advance(250)
    assert.equal(asked.length, 2)
    assert.equal(stuck.length, 0, 'reported on a no')
    await advance(100)
    asked[1]?.answer(true)
    await advance(0)
    assert.deepEqual(stuck, [{ slot: 0, at: start + 1850, ms: 1850, unacknowledged: true }])
    await advance(10_000)
    assert.equal(stuck.length, 1, 'reported twice')
    assert.equal(asked.length, 2, 'asked after the report')
    releaseAll()
    assert.equal(await first, 10)

    // A yes that comes after the statement was answered is about another statement: ignored.
    const second = b.submit(2, clock.now() + 20_000)
    await advance(1000)
    assert.equal(asked.length, 3)
    releaseAll()
    assert.equal(await second, 20)
    const third = b.submit(3, clock.now() + 20_000)
    asked[2]?.answer(true)
    await advance(0)
    assert.equal(stuck.length, 1, 'a late yes reported the next statement')
    releaseAll()
    assert.equal(await third, 30)
  })

  test('a probe still waiting for a slot at its deadline is rejected as unavailable (deadline) at that moment, and never runs', async () => {
    const { store, releaseAll } = gatedStore()
    const { clock, advance } = manualClock()
    const b = createBatcher(store, { maxBatch: 1, maxInFlight: 1, maxQueued: 10 }, {}, clock)
    const busy = b.submit(1)
    await advance(0)
    let ran = false
    let rejectedAt: number | undefined
    let reason: unknown
    const deadline = clock.now() + 100
    void b
      .probe(async () => {
        ran = true
      }, deadline)
      .catch((err: unknown) => {
        rejectedAt = clock.now()
        reason = err
      })
    await advance(99)
    assert.equal(rejectedAt, undefined)
    await advance(1)
    assert.equal(rejectedAt, deadline)
    assert.ok(reason instanceof DatabaseUnavailable && reason.reason === 'deadline', String(reason))
    releaseAll()
    assert.equal(await busy, 10)
    await settle()
    assert.equal(ran, false, 'ran after its deadline')
  })

  test('a batch whose statement failed for want of a database is sent again as it is, until it is stored', async () => {
    const sent: number[][] = []
    let failures = 3
    const store = async (items: readonly number[]) => {
      sent.push([...items])
      if (failures-- > 0) throw Object.assign(new Error('connection reset'), { code: 'ECONNRESET' })
      return items.map((i) => i * 10)
    }
    const events: string[] = []
    const b = createBatcher(
      store,
      { maxBatch: 10, maxInFlight: 1, maxQueued: 10 },
      {
        held: (reason, items, first) => events.push(`held ${reason} ${items} ${first}`),
        through: () => events.push('through'),
        heldEnded: (outcome) => events.push(`ended ${outcome}`),
      },
    )
    const all = [1, 2].map((i) => b.submit(i, performance.now() + 5000))
    assert.deepEqual(await Promise.all(all), [10, 20])
    assert.deepEqual(sent, [
      [1, 2],
      [1, 2],
      [1, 2],
      [1, 2],
    ])
    assert.deepEqual(events, [
      'held connection_lost 2 2',
      'held connection_lost 2 0',
      'held connection_lost 2 0',
      'ended answered',
      'ended answered',
      'through',
    ])
  })

  test('a held item that then ends in a fault (neither stored nor unavailable) is counted as a fault, not as answered', async () => {
    let calls = 0
    const store = async (items: readonly number[]): Promise<(number | Error)[]> => {
      if (calls++ === 0) throw Object.assign(new Error('connection reset'), { code: 'ECONNRESET' })
      return items.map(() => new Error('a fault of our own'))
    }
    const ended: string[] = []
    const b = createBatcher(
      store,
      { maxBatch: 10, maxInFlight: 1, maxQueued: 10 },
      { heldEnded: (outcome) => ended.push(outcome) },
    )
    assert.equal(short(await b.submit(1, performance.now() + 5000)), 'fault: a fault of our own')
    assert.deepEqual(ended, ['fault'])
  })

  test('a held item is answered unavailable at its deadline, naming why it was held, and is never sent after it', async () => {
    const { clock, advance } = manualClock()
    const sentAt: number[] = []
    const store = async (): Promise<number[]> => {
      sentAt.push(clock.now())
      throw Object.assign(new Error('the database system is starting up'), { code: '57P03' })
    }
    let expired = 0
    const b = createBatcher(
      store,
      { maxBatch: 10, maxInFlight: 1, maxQueued: 10 },
      { expired: () => expired++ },
      clock,
    )
    const started = clock.now()
    let answer: Settled<number> | undefined
    let answeredAt: number | undefined
    void b.submit(1, started + 300).then((o) => {
      answer = o
      answeredAt = clock.now()
    })
    await advance(299)
    assert.equal(answeredAt, undefined, 'answered before its deadline')
    await advance(1)
    assert.ok(
      typeof answer === 'object' &&
        answer.kind === 'unavailable' &&
        answer.reason === 'deadline' &&
        /not accepting/.test(answer.detail),
      JSON.stringify(answer),
    )
    assert.equal(answeredAt, started + 300)
    // Sent again after pauses that double from 10 ms: at 0, 10, 30, 70, 150 ms (the next, 310).
    assert.deepEqual(
      sentAt.map((at) => at - started),
      [0, 10, 30, 70, 150],
    )
    await advance(1000)
    assert.equal(sentAt.length, 5, 'sent again after its deadline')
    assert.equal(expired, 1)
    assert.equal(b.load().queued, 0)
  })

  test('a statement cut by the statement timeout (57014) is not sent again: it had its database', async () => {
    let sends = 0
    const store = async (): Promise<number[]> => {
      sends++
      throw Object.assign(new Error('canceling statement due to statement timeout'), {
        code: '57014',
      })
    }
    const b = createBatcher(store, { maxBatch: 10, maxInFlight: 1, maxQueued: 10 })
    assert.equal(short(await b.submit(1, performance.now() + 2000)), 'database')
    assert.equal(sends, 1)
  })

  test('an item of a part that failed for want of a database is held alone; its batch mates are answered', async () => {
    const sent: number[][] = []
    let lost = true
    const store = async (items: readonly number[]) => {
      sent.push([...items])
      const outcomes = items.map((i) =>
        i === 2 && lost
          ? Object.assign(new Error('connection refused'), { code: 'ECONNREFUSED' })
          : i * 10,
      )
      lost = false
      return outcomes
    }
    const b = createBatcher(store, { maxBatch: 10, maxInFlight: 1, maxQueued: 10 })
    const all = [1, 2, 3].map((i) => b.submit(i, performance.now() + 5000))
    assert.deepEqual(await Promise.all(all), [10, 20, 30])
    assert.deepEqual(sent, [[1, 2, 3], [2]])
  })

  test('held items go back ahead of those waiting, and the latest waiting past maxQueued are refused (queue_full), never sent', async () => {
    const sent: number[][] = []
    let fail = true
    let release: () => void = () => {}
    const store = async (items: readonly number[]) => {
      sent.push([...items])
      if (fail) {
        await new Promise<void>((r) => {
          release = r
        })
        fail = false
        throw Object.assign(new Error('terminated'), { code: '57P01' })
      }
      return items.map((i) => i * 10)
    }
    const b = createBatcher(store, { maxBatch: 2, maxInFlight: 1, maxQueued: 3 })
    const deadline = performance.now() + 5000
    const submit = (i: number) => b.submit(i, deadline).then(short)
    const outcomes = [submit(1), submit(2)]
    await tick()
    outcomes.push(...[3, 4, 5].map(submit))
    assert.deepEqual(sent, [[1, 2]])
    assert.equal(b.load().queued, 3)
    release()
    assert.deepEqual(await Promise.all(outcomes), [10, 20, 30, 'queue_full', 'queue_full'])
    assert.deepEqual(sent, [[1, 2], [1, 2], [3]])
  })
})
