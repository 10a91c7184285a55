import assert from 'node:assert/strict'
import { dirname, join } from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

// postgres.js keeps its pool's connections in queues (src/queue.js). patches/postgres+3.4.9.patch,
// applied at install to the build that Node and Deno load, keeps them from growing with every
// statement the pool has served (patches/README.md; BENCHMARKS.md, "The driver's queue").
type Queue<T> = {
  readonly length: number
  push: (x: T) => T
  shift: () => T
  remove: (x: T) => T | null
}
type QueueFactory = <T>(initial?: T[]) => Queue<T>

// What `import 'postgres'` loads (its "import" condition, which Deno follows too).
const loaded = fileURLToPath(import.meta.resolve('postgres'))
const load = async (): Promise<QueueFactory> =>
  (await import(pathToFileURL(join(dirname(loaded), 'queue.js')).href)).default

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void
function heapUsed(): number {
  gc()
  return process.memoryUsage().heapUsed
}

const cycles = 1_000_000
// A connection as the pool holds it.
const connections = () => Array.from({ length: 10 }, (_, i) => ({ i }))

describe("the postgres driver's connection queue, as Node and Deno load it", () => {
  test('the driver loads from its src/ build, the one the patch changes', () => {
    assert.match(loaded, /node_modules\/postgres\/src\/index\.js$/)
  })
  test(`a queue that never empties keeps its memory over a million shift/push cycles`, async () => {
    const Queue = await load()
    const q = Queue<{ i: number }>()
    for (const c of connections()) q.push(c)
    const before = heapUsed()
    // The idle connections of a busy pool: one is taken for each statement and comes back.
    for (let n = 0; n < cycles; n++) q.push(q.shift())
    const grown = heapUsed() - before
    // Unpatched, the backing array keeps a hole per shift: about 8 MB here.
    assert.ok(grown < 1_000_000, `the queue grew by ${grown} bytes over ${cycles} cycles`)
    assert.equal(q.length, 10)
    assert.deepEqual(
      Array.from({ length: 10 }, () => q.shift().i),
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    )
  })

  test(`the pool's own cycle (shift, remove, push) keeps order and contents over a million statements`, async () => {
    const Queue = await load()
    const open = Queue<{ i: number }>()
    const busy = Queue<{ i: number }>()
    const all = connections()
    for (const c of all) open.push(c)
    for (let n = 0; n < cycles; n++) {
      // handler(): open.shift(), then move(c, busy) removes it from open (already gone).
      const c = open.shift()
      assert.equal(open.remove(c), null)
      busy.push(c)
      // onopen(): back from busy to open.
      assert.equal(busy.remove(c), c)
      open.push(c)
    }
    assert.equal(busy.length, 0)
    assert.equal(open.remove(all[5] as { i: number }), all[5])
    assert.deepEqual(
      Array.from({ length: open.length }, () => open.shift().i),
      [0, 1, 2, 3, 4, 6, 7, 8, 9],
    )
  })
})
