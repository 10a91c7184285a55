import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createDeadlineQueue } from '../src/plants/deadline-queue.ts'

type Item = { name: string; expiresAt: number }
const item = (name: string, expiresAt: number): Item => ({ name, expiresAt })
const names = (items: readonly Item[]) => items.map((i) => i.name)
/** A queue holding an item of each name, due at its deadline. */
function queueOf(deadlines: Record<string, number>) {
  const q = createDeadlineQueue<Item>()
  for (const [name, at] of Object.entries(deadlines)) q.insert(item(name, at))
  return q
}

describe('the deadline queue', () => {
  test('items leave in the order of their deadlines; equal deadlines in the order they came', () => {
    const q = createDeadlineQueue<Item>()
    assert.equal(q.insert(item('b', 20)), 0)
    assert.equal(q.insert(item('c', 30)), 1)
    assert.equal(q.insert(item('a', 10)), 0)
    assert.equal(q.insert(item('b2', 20)), 2)
    assert.equal(q.head()?.name, 'a')
    assert.deepEqual(names(q.take(10)), ['a', 'b', 'b2', 'c'])
    assert.equal(q.size(), 0)
  })

  test('takeExpired takes exactly the items due at or before now, and nothing when none is', () => {
    const q = queueOf({ x: 5, y: 10, z: 11 })
    assert.deepEqual(q.takeExpired(4), [])
    assert.deepEqual(names(q.takeExpired(10)), ['x', 'y'])
    assert.deepEqual(names(q.take(5)), ['z'])
  })

  test('merged items go back in deadline order, ahead of waiting items of the same deadline', () => {
    const q = createDeadlineQueue<Item>()
    q.insert(item('w10', 10))
    q.insert(item('w30', 30))
    q.merge([item('h30', 30), item('h5', 5), item('h40', 40), item('h10', 10)])
    assert.deepEqual(names(q.take(10)), ['h5', 'h10', 'w10', 'h30', 'w30', 'h40'])
  })

  test('takeBeyond takes the latest deadlines past the first `keep`', () => {
    const q = queueOf({ a: 1, b: 2, c: 3, d: 4 })
    assert.deepEqual(names(q.takeBeyond(2)), ['c', 'd'])
    assert.deepEqual(names(q.takeBeyond(5)), [])
    assert.equal(q.size(), 2)
  })
})
