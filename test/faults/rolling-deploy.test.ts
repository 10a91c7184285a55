import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createTestDatabase } from '../helpers/database.ts'
import { driveCreates, lostAcknowledgements, underWay } from '../helpers/drive.ts'
import { haproxyPath, haproxyPresent, haproxySkip, startHaproxy } from '../helpers/haproxy.ts'
import { serverPort } from '../helpers/ports.ts'
import { type ServiceProcess, startServiceProcess, tokenFor } from '../helpers/process.ts'
import { sleep, within } from '../helpers/wait.ts'

describe('a rolling deploy behind HAProxy', () => {
  test('two instances restarted in turn with SIGTERM under 8 keep-alive clients, the balancer checking /readyz every 500 ms without retry-on: no client error, no 5xx, nothing lost', {
    skip: haproxySkip,
  }, async () => {
    assert.ok(haproxyPresent, `CI needs ${haproxyPath} (apt-get install haproxy)`)
    const db = await createTestDatabase({ after })
    const ports = [await serverPort(), await serverPort()]
    // The service with its defaults, as an operator runs it (DRAIN_DELAY 3 s).
    const start = (port: number) =>
      startServiceProcess('node', { DATABASE_URL: db.url, PORT: String(port) }, { after })
    const instances: ServiceProcess[] = [await start(ports[0] ?? 0), await start(ports[1] ?? 0)]
    const token = await tokenFor(db.sql, instances[0]?.base ?? '', 'rolling')
    await within(2000, async () => {
      const res = await fetch(`${instances[1]?.base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
      })
      await res.arrayBuffer()
      return res.status !== 401
    })
    const balancer = await startHaproxy({ after }, ports)

    const drive = driveCreates(balancer.url, token, { concurrency: 8 })
    await underWay(drive)
    const stops: number[] = []
    for (const [i, port] of ports.entries()) {
      const old = instances[i]
      assert.ok(old)
      const signalled = performance.now()
      old.child.kill('SIGTERM')
      assert.equal(await old.exited, 0)
      stops.push(performance.now() - signalled)
      const fresh = await start(port)
      instances[i] = fresh
      await within(10_000, async () => (await fetch(`${fresh.base}/readyz`)).status === 200)
      // Two good checks 500 ms apart before HAProxy sends to it again.
      await sleep(1500)
    }
    await drive.stop()

    const statuses = JSON.stringify(Object.fromEntries(drive.statuses))
    process.stderr.write(
      `# rolling deploy: ${drive.acknowledged.length} creates answered 200, statuses ${statuses}, each stop ${stops.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(' and ')}\n`,
    )
    assert.deepEqual([...drive.statuses.keys()], [200], `statuses: ${statuses}`)
    assert.deepEqual(await lostAcknowledgements(db.sql, drive.acknowledged), [])
    assert.ok(
      stops.every((ms) => ms < 10_000),
      `a stop took ${stops.map(Math.round).join(', ')} ms`,
    )
  })
})
