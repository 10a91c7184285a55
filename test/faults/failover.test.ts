import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { parseConfig } from '../../src/config.ts'
import { createLog } from '../../src/log.ts'
import { startService } from '../../src/service.ts'
import { bodyOf, driveCreates, lostAcknowledgements } from '../helpers/drive.ts'
import { tokenFor } from '../helpers/process.ts'
import {
  connect,
  makeStandby,
  startPrimaryAndStandby,
  startServer,
} from '../helpers/replication.ts'
import { startTcpProxy } from '../helpers/tcp-proxy.ts'
import { within } from '../helpers/wait.ts'

/** The service on a URL listing both servers, as libpq writes it; its log lines are kept. */
async function serviceOn(ports: number[], t: { after: (fn: () => unknown) => void }) {
  const hosts = ports.map((port) => `127.0.0.1:${port}`).join(',')
  const url = `postgres://postgres@${hosts}/plants?target_session_attrs=read-write`
  const lines: Record<string, unknown>[] = []
  const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
  const service = await startService(parseConfig({ DATABASE_URL: url, PORT: '0' }), log)
  t.after(() => service.close())
  return { ...service, lines }
}

async function retryAll(base: string, token: string, bodies: string[]): Promise<number[]> {
  const statuses: number[] = []
  for (const body of bodies) {
    const res = await fetch(`${base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body,
    })
    await res.arrayBuffer()
    statuses.push(res.status)
  }
  return statuses
}

describe('a primary with a synchronous standby (real PostgreSQL 18 servers)', () => {
  test('listed standby first, the service migrates on and writes to the primary only; every 200 is on the standby too', async () => {
    const { primary, standby, cleanup } = await startPrimaryAndStandby({ after })
    const service = await serviceOn([standby.port, primary.port], cleanup)
    const primarySql = connect(primary.port)
    cleanup.after(() => primarySql.end())
    const token = await tokenFor(primarySql, service.url, 'replicas')
    const drive = driveCreates(service.url, token, { concurrency: 8 })
    await new Promise((r) => setTimeout(r, 1500))
    await drive.stop()
    assert.deepEqual([...drive.statuses.keys()], [200])
    assert.ok(drive.acknowledged.length > 0)
    assert.deepEqual(await lostAcknowledgements(primarySql, drive.acknowledged), [])
    const standbySql = connect(standby.port)
    cleanup.after(() => standbySql.end())
    assert.deepEqual(await lostAcknowledgements(standbySql, drive.acknowledged), [])
  })

  test('failover: kill -9 the primary under load, promote the standby: nothing acknowledged lost, every 503 safe to retry, 200s within 5 s of the promotion; then the old primary back read-only, listed first', async () => {
    const { primary, standby, primaryDir, cleanup } = await startPrimaryAndStandby({ after })
    const service = await serviceOn([primary.port, standby.port], cleanup)
    const firstSql = connect(primary.port)
    const token = await tokenFor(firstSql, service.url, 'failover')
    await firstSql.end()

    const drive = driveCreates(service.url, token, { concurrency: 8 })
    await new Promise((r) => setTimeout(r, 1500))
    const killed = performance.now()
    primary.child.kill('SIGKILL')
    await primary.exited
    // An operator (or Patroni) notices and promotes the standby.
    await new Promise((r) => setTimeout(r, 1000))
    const promoting = connect(standby.port, 'postgres')
    await promoting`select pg_promote(true, 30)`
    const promoted = performance.now()
    await promoting.end()
    await new Promise((r) => setTimeout(r, 5000))
    await drive.stop()

    const newPrimary = connect(standby.port)
    cleanup.after(() => newPrimary.end())
    const statuses = Object.fromEntries(drive.statuses)
    assert.deepEqual(
      Object.keys(statuses).filter((s) => s !== '200' && s !== '503'),
      [],
      `statuses: ${JSON.stringify(statuses)}`,
    )
    assert.deepEqual(await lostAcknowledgements(newPrimary, drive.acknowledged), [], 'lost')
    const firstAfter = drive.acknowledgedAt.find((at) => at > promoted)
    assert.ok(firstAfter !== undefined && firstAfter - promoted < 5000, 'no 200 within 5 s')
    // Each 503 is safe to retry: the same body gets 200, stored once, never 40009.
    const retried = await retryAll(service.url, token, drive.unavailable.map(bodyOf))
    assert.ok(
      retried.every((s) => s === 200),
      `retries: ${JSON.stringify(retried)}`,
    )
    assert.deepEqual(await lostAcknowledgements(newPrimary, drive.unavailable), [])
    const [{ rows }] = (await newPrimary`select count(*)::int as rows from plants`) as unknown as [
      { rows: number },
    ]
    assert.equal(rows, drive.acknowledged.length + drive.unavailable.length)
    assert.ok(!service.lines.some((l) => l.status === 500), 'a 500 was answered')
    process.stderr.write(
      `# failover: ${drive.acknowledged.length} creates answered 200, ${drive.unavailable.length} answered 503 (all 200 on retry), ${rows} rows; primary killed at 0 ms, first 503 ${drive.unavailableAt[0] === undefined ? 'never' : `at ${Math.round(drive.unavailableAt[0] - killed)} ms`}, standby promoted at ${Math.round(promoted - killed)} ms, first 200 ${Math.round((firstAfter ?? Number.NaN) - promoted)} ms after the promotion\n`,
    )

    // The old primary comes back as a read-only server, first in the URL: a new instance
    // migrates on and writes to the new primary only.
    await makeStandby(primaryDir, standby.port, 'old-primary')
    await startServer(primaryDir, primary.port, cleanup)
    const readOnly = connect(primary.port, 'postgres')
    const [{ recovery }] = (await readOnly`select pg_is_in_recovery() as recovery`) as unknown as [
      { recovery: boolean },
    ]
    await readOnly.end()
    assert.equal(recovery, true)
    const again = await serviceOn([primary.port, standby.port], cleanup)
    const later = driveCreates(again.url, token, { concurrency: 4 })
    await new Promise((r) => setTimeout(r, 1500))
    await later.stop()
    assert.deepEqual([...later.statuses.keys()], [200])
    assert.deepEqual(await lostAcknowledgements(newPrimary, later.acknowledged), [])
  })

  test('a name that still points at a read-only server: 503 with Retry-After, never 500, then 200 within 5 s of it pointing at the primary again', async () => {
    const { primary, standby, cleanup } = await startPrimaryAndStandby({ after })
    const primaryUrl = `postgres://postgres@127.0.0.1:${primary.port}/plants`
    // The proxy plays a DNS name: it sends new connections wherever it points now.
    const name = await startTcpProxy(primaryUrl)
    cleanup.after(() => name.close())
    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
    const service = await startService(parseConfig({ DATABASE_URL: name.url, PORT: '0' }), log)
    cleanup.after(() => service.close())
    const primarySql = connect(primary.port)
    cleanup.after(() => primarySql.end())
    const token = await tokenFor(primarySql, service.url, 'dns')
    const post = async () => {
      const res = await fetch(`${service.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          id: Date.now() * 1000 + Math.floor(Math.random() * 1000),
          name: 'dns',
        }),
      })
      const body = (await res.json()) as { error?: number }
      if (res.status === 503) assert.equal(res.headers.get('retry-after'), '1')
      return { status: res.status, error: body.error }
    }
    assert.equal((await post()).status, 200)

    // The name now points at the standby, and the service's sessions on the primary end.
    name.retarget(`postgres://postgres@127.0.0.1:${standby.port}/plants`)
    await primarySql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'plant-store'`
    const metReadOnly = () => lines.some((l) => l.reason === 'database error 25006')
    await within(5000, async () => (await post()).status === 503 && metReadOnly())

    // The name points at the primary again: the service leaves the read-only server by itself.
    name.retarget(primaryUrl)
    const back = await within(5000, async () => (await post()).status === 200)
    assert.ok(!lines.some((l) => l.status === 500), 'a 500 was answered')
    process.stderr.write(
      `# read-only server left: 200 again ${Math.round(back)} ms after the name pointed back\n`,
    )
  })
})
