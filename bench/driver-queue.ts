// npx tsx bench/driver-queue.ts
// The postgres driver's connection queue, without a database: the pool's own cycle for each
// statement (open.shift(), then move(c, busy) calls open.remove(c), then back with
// busy.remove(c) and open.push(c)), timed per statement after a given number of statements, for
// the queue as postgres.js 3.4.9 publishes it and as patches/postgres+3.4.9.patch leaves it.
// The upstream report in BENCHMARKS.md quotes this script's output.
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void
const heapMb = () => {
  gc()
  return process.memoryUsage().heapUsed / 2 ** 20
}

type Queue<T> = {
  readonly length: number
  push: (x: T) => T
  shift: () => T
  remove: (x: T) => T | null
}

// postgres.js 3.4.9, src/queue.js (MIT, Rasmus Porsager), unchanged but for the types.
function PublishedQueue<T>(initial: T[] = []): Queue<T> {
  let xs: (T | undefined)[] = initial.slice()
  let index = 0
  return {
    get length() {
      return xs.length - index
    },
    remove: (x) => {
      const index = xs.indexOf(x)
      // biome-ignore lint/complexity/noCommaOperator: the published code, as it is
      return index === -1 ? null : (xs.splice(index, 1), x)
    },
    // biome-ignore lint/complexity/noCommaOperator: the published code, as it is
    push: (x) => (xs.push(x), x),
    shift: () => {
      const out = xs[index++] as T
      if (index === xs.length) {
        index = 0
        xs = []
      } else {
        xs[index - 1] = undefined
      }
      return out
    },
  }
}

const driverDir = dirname(fileURLToPath(import.meta.resolve('postgres')))
const PatchedQueue = (await import(pathToFileURL(join(driverDir, 'queue.js')).href)).default as <
  T,
>() => Queue<T>

/**
 * Microseconds per statement of the pool's cycle, measured over `sample` statements after
 * `served`, and the heap the queues hold by then (MB).
 */
function perStatement(
  make: <T>() => Queue<T>,
  served: number,
  sample: number,
): { us: number; heldMb: number } {
  const heapBefore = heapMb()
  const open = make<{ i: number }>()
  const busy = make<{ i: number }>()
  // 10 connections, at most 2 busy at a time: the service's pool.
  for (let i = 0; i < 10; i++) open.push({ i })
  const cycle = () => {
    const c = open.shift()
    open.remove(c)
    busy.push(c)
    busy.remove(c)
    open.push(c)
  }
  // Serving the first statements fast: shift and push alone leave the same holes.
  for (let n = 0; n < served; n++) open.push(open.shift())
  const heldMb = heapMb() - heapBefore
  const started = performance.now()
  for (let n = 0; n < sample; n++) cycle()
  return { us: ((performance.now() - started) * 1000) / sample, heldMb }
}

process.stdout.write(
  'statements served   published: µs/statement  heap MB   patched: µs/statement  heap MB\n',
)
for (const served of [0, 10_000, 100_000, 1_000_000, 3_000_000]) {
  const patched = perStatement(PatchedQueue, served, 200_000)
  const published = perStatement(PublishedQueue, served, served >= 1_000_000 ? 500 : 2_000)
  process.stdout.write(
    `${served.toLocaleString('en').padStart(17)}   ${published.us.toFixed(3).padStart(22)}  ${published.heldMb.toFixed(1).padStart(7)}   ${patched.us.toFixed(3).padStart(20)}  ${patched.heldMb.toFixed(1).padStart(7)}\n`,
  )
}
