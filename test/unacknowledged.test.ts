import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type Server, Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { unacknowledged } from '../src/db/reach/unacknowledged.ts'
import { partition, partitionSkip, partitionUnavailable } from './helpers/partition.ts'
import { sleep } from './helpers/wait.ts'

// The partition needs root and iptables, which CI has; elsewhere its case skips with the reason.
const partitionMissing = partitionUnavailable()

/** A TCP server on 127.0.0.1 that accepts and never reads, and a client connected to it. */
async function connectedToASilentReader(): Promise<{ server: Server; client: Socket }> {
  const accepted: Socket[] = []
  const server = createServer((s) => {
    s.pause()
    accepted.push(s)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const client = new Socket()
  client.connect((server.address() as { port: number }).port, '127.0.0.1')
  await once(client, 'connect')
  after(() => {
    client.destroy()
    for (const s of accepted) s.destroy()
    server.close()
  })
  return { server, client }
}

describe("bytes the server's kernel has not acknowledged (/proc/net/tcp)", () => {
  test('a server that reads nothing still has its kernel acknowledge what it was sent: not reported', async () => {
    const { client } = await connectedToASilentReader()
    client.write(Buffer.alloc(16 * 1024, 1))
    await sleep(300)
    assert.equal(await unacknowledged(() => [client]), false)
  })

  test('bytes sent into a silent partition are reported, seen twice 250 ms apart; after the heal they are not', {
    skip: partitionSkip(),
  }, async (t) => {
    if (partitionMissing !== undefined) throw new Error(partitionMissing)
    const { server, client } = await connectedToASilentReader()
    const cut = partition((server.address() as { port: number }).port, 'both', t)
    client.write('a statement')
    await sleep(300)
    assert.equal(await unacknowledged(() => [client]), true)
    cut.heal()
    // The kernel's next retransmission (at most 1.4 s after the send by then) gets through.
    const healed = performance.now()
    while (await unacknowledged(() => [client])) {
      assert.ok(performance.now() - healed < 5000, 'still unacknowledged 5 s after the heal')
      await sleep(100)
    }
  })

  test('a socket that is not TCP, or was destroyed, is not reported', async () => {
    const { client } = await connectedToASilentReader()
    client.destroy()
    assert.equal(await unacknowledged(() => [client, new Socket()]), false)
  })
})
