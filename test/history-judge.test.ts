import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { judge, type Op, seeded, unavailableByFault } from './helpers/history.ts'

// The judge of the randomized fault run (test/faults/randomized.test.ts) finds each kind of
// violation it is there for, and none in a clean history.

const plant = { id: '7', name: 'fern', tag: null }
const op = (over: Partial<Op>): Op => ({
  plant,
  kind: 'fresh',
  sentAt: 1000,
  answeredAt: 1010,
  ending: 200,
  body: { name: 'fern' },
  ...over,
})
const settings = {
  heals: [],
  resetWindows: [] as [number, number][],
  deadlineMs: 7500,
  recoveryMs: 5000,
}
const stored = new Map([['7', { name: 'fern', tag: null }]])
const problemsOf = (history: Op[], rows = stored, extra = {}) =>
  judge(history, rows, { ...settings, ...extra })

describe('the judge of a fault history', () => {
  test('a clean history has no problem: a 200, a retry, a real 40009, a 503 with Retry-After, a reset while a worker died', () => {
    const other = { id: '7', name: 'fern (other)', tag: null }
    assert.deepEqual(
      problemsOf(
        [
          op({}),
          op({ kind: 'retry' }),
          op({ plant: other, kind: 'conflict', ending: 400, error: 40009, body: {} }),
          op({ ending: 503, error: 50301, retryAfter: '1' }),
          op({ ending: 'reset', sentAt: 2000, answeredAt: 2001 }),
        ],
        stored,
        { resetWindows: [[1990, 2990]], heals: [{ fault: 'x', at: 900 }] },
      ),
      [],
    )
  })

  test('each violation is found', () => {
    const found = (history: Op[], rows = stored, extra = {}) =>
      problemsOf(history, rows, extra).map((p) => p.split(':')[0])
    assert.deepEqual(found([op({})], new Map()), ['acknowledged but not stored'])
    assert.deepEqual(found([op({})], new Map([['7', { name: 'palm', tag: null }]])), [
      'acknowledged but another row stored (["palm",null])',
      'a row from nowhere',
    ])
    assert.deepEqual(found([op({ ending: 400, error: 40009, body: {} })]), [
      '40009 for the stored contents',
    ])
    assert.deepEqual(found([op({ ending: 503, error: 50301, retryAfter: null })]), [
      '503 with error 50301 and Retry-After null',
    ])
    assert.deepEqual(found([op({ ending: 'timeout', answeredAt: 16_000 })]), [
      'an answer later than 7500 ms',
      'no answer and no reset within 15 s',
    ])
    assert.deepEqual(found([op({ ending: 'reset' })]), ['a reset with no worker killed'])
    assert.deepEqual(found([op({ ending: 500 })]), ['status 500'])
    assert.deepEqual(found([op({ body: { name: 'palm' } })]), [
      'a 200 whose body is not what was sent ({"name"',
    ])
    assert.deepEqual(found([op({})], stored, { heals: [{ fault: 'x', at: 2000 }] }), [
      'no 200 within 5000 ms of the end of x (first never)',
    ])
  })

  test('the generator is seeded: the same seed, the same numbers; another seed, others', () => {
    const take = (seed: number) => Array.from({ length: 5 }, seeded(seed))
    assert.deepEqual(take(1), take(1))
    assert.notDeepEqual(take(1), take(2))
  })

  test("503s are counted by the fault they fell in; one in none, or in a fault shorter than the deadline that ended 1 s or more before the create's deadline, is a problem", () => {
    const faults = [
      { fault: 'a fast restart', from: 10_000, to: 11_500 },
      { fault: 'a 10 s partition', from: 20_000, to: 30_000 },
      { fault: 'a slow restart', from: 50_000, to: 55_800 },
    ]
    const unavailable = (sentAt: number, answeredAt: number) =>
      op({ ending: 503, error: 50301, retryAfter: '1', sentAt, answeredAt })
    const { tally, problems } = unavailableByFault(
      [
        op({}),
        unavailable(25_000, 31_000),
        unavailable(30_500, 36_500),
        unavailable(10_500, 16_500),
        unavailable(40_000, 46_000),
        // Sent as the slow restart began: its deadline came 200 ms after the restart's end.
        unavailable(50_000, 55_700),
        // Sent 1 s into it: 1.2 s of its deadline were left.
        unavailable(51_000, 56_700),
      ],
      faults,
      { deadlineMs: 6000 },
    )
    assert.deepEqual(tally, { 'a fast restart': 1, 'a 10 s partition': 2, 'a slow restart': 2 })
    assert.equal(problems.length, 3, problems.join('; '))
    assert.match(problems[0] ?? '', /"a fast restart", which lasted 1500 ms/)
    assert.match(problems[1] ?? '', /in no fault/)
    assert.match(
      problems[2] ?? '',
      /"a slow restart", which lasted 5800 ms, .* ended 1200 ms before/,
    )
  })
})
