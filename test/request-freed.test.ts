import assert from 'node:assert/strict'
import diagnostics from 'node:diagnostics_channel'
import { after, describe, test } from 'node:test'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { bodyOf } from './helpers/drive.ts'
import { createRequest, exchange, openSocket } from './helpers/raw-http.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { sleep, within } from './helpers/wait.ts'

// Node's HTTP parser keeps a connection's request (`parser.incoming`) until the request's
// stream has ended. A create whose body came with its headers is taken from the stream's buffer
// at once, and its stream is never read to its end (src/http/body.ts): unless the service drops
// the parser's hold after the answer, the request (with its headers, about 1 kB) lives until the
// connection's next request. With hundreds of connections kept alive, each sending every few
// hundred milliseconds, those were 320 kB that every young-generation collection copied, half a
// millisecond of each pause (BENCHMARKS.md, "A connection's last request").

// V8's collector, callable from here: a freed request is then gone at once, not at V8's whim.
setFlagsFromString('--expose-gc')
const collect = runInNewContext('gc') as () => void

const s = await startTestServer({ after })
const authorization = `Authorization: Bearer ${s.token}\r\n`

/** Every request the server receives from now on, held weakly. */
function watchRequests(): WeakRef<object>[] {
  const seen: WeakRef<object>[] = []
  const onStart = (message: unknown) => {
    seen.push(new WeakRef((message as { request: object }).request))
  }
  diagnostics.subscribe('http.server.request.start', onStart)
  after(() => diagnostics.unsubscribe('http.server.request.start', onStart))
  return seen
}

/** Whether every request in `seen` is freed, after two collections (the second in a new turn). */
async function allFreed(seen: readonly WeakRef<object>[]): Promise<boolean> {
  collect()
  // A WeakRef keeps its target through the turn that made or read it.
  await new Promise((resolve) => setImmediate(resolve))
  collect()
  return seen.every((ref) => ref.deref() === undefined)
}

const create = () => bodyOf({ id: String(uniqueId()), name: 'answered, then freed', tag: null })

describe('a request once answered, its connection kept open', () => {
  test('creates whose bodies came with their headers are freed before the connection sends again', async () => {
    const seen = watchRequests()
    const socket = await openSocket(s.base)
    after(() => socket.destroy())
    for (let i = 0; i < 3; i++) {
      // One write: the body arrives in the headers' read and is taken whole from the buffer.
      const { status } = await exchange(socket, createRequest(create(), authorization))
      assert.equal(status, 200)
    }
    assert.equal(seen.length, 3, 'the server saw the three creates')
    await within(5000, () => allFreed(seen))
    assert.ok(!socket.destroyed, 'the connection is still open')
  })

  test('a create whose body came after its headers is freed too', async () => {
    const seen = watchRequests()
    const socket = await openSocket(s.base)
    after(() => socket.destroy())
    const bytes = createRequest(create(), authorization)
    const headEnd = bytes.indexOf('\r\n\r\n') + 4
    socket.write(bytes.slice(0, headEnd))
    // The body in a read of its own: the stream's events carry it.
    await sleep(50)
    const { status } = await exchange(socket, bytes.slice(headEnd))
    assert.equal(status, 200)
    assert.equal(seen.length, 1)
    await within(5000, () => allFreed(seen))
  })

  test('an answer made before the body is read (a refused token) frees its request', async () => {
    const seen = watchRequests()
    const socket = await openSocket(s.base)
    after(() => socket.destroy())
    const { status } = await exchange(
      socket,
      createRequest(create(), 'Authorization: Bearer not-a-token\r\n'),
    )
    assert.equal(status, 401)
    await within(5000, () => allFreed(seen))
  })
})
