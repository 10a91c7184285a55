import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { limits } from '../../src/limits.ts'
import { driveCreates, lostAcknowledgements, pastTheFault, underWay } from '../helpers/drive.ts'
import { startHaproxyForPatroni } from '../helpers/haproxy.ts'
import { patroniUnavailable, startPatroniCluster } from '../helpers/patroni.ts'
import { startServiceProcess, tokenFor } from '../helpers/process.ts'
import { within } from '../helpers/wait.ts'

// Outside CI a machine without Patroni, etcd or PostgreSQL 15 skips this file with the reason;
// in CI their absence is a failure (.ci/run installs them).
const missing = patroniUnavailable()
const skip = missing !== undefined && !process.env.CI ? missing : false

// Each test starts a cluster (etcd, Patroni, servers) of its own: the two run at once.
describe('a Patroni switchover', { skip, concurrency: 2 }, () => {
  /**
   * A planned switchover under 8 keep-alive clients, the service reaching the cluster by
   * `how`: every create 200, none slower than the deadline + 0.5 s, none lost.
   */
  async function switchoverUnderLoad(how: 'multi-host URL' | 'HAProxy') {
    assert.equal(missing, undefined, missing)
    const cluster = await startPatroniCluster({ after })
    const from = await cluster.leader()
    const url =
      how === 'HAProxy'
        ? `postgres://postgres:postgres@127.0.0.1:${await startHaproxyForPatroni(cluster.cleanup, cluster.members)}/plants`
        : cluster.url
    const service = await startServiceProcess('node', { DATABASE_URL: url }, cluster.cleanup)
    const sql = postgres(cluster.urlOf(from), { max: 2, onnotice: () => {} })
    const token = await tokenFor(sql, service.base, 'patroni')
    await sql.end()

    const drive = driveCreates(service.base, token, { concurrency: 8 })
    await underWay(drive)
    const asked = performance.now()
    const to = await cluster.switchover(from)
    await within(30_000, async () => (await cluster.leader(30_000)) === to)
    const settled = performance.now()
    await pastTheFault(drive, settled)
    await drive.stop()

    const statuses = JSON.stringify(Object.fromEntries(drive.statuses))
    process.stderr.write(
      `# Patroni switchover, ${how}: the new leader with its synchronous replica ${Math.round(settled - asked)} ms after asking; ${drive.acknowledged.length} creates, statuses ${statuses}, slowest ${Math.round(drive.slowestMs)} ms\n`,
    )
    assert.deepEqual([...drive.statuses.keys()], [200], `statuses: ${statuses}`)
    assert.ok(drive.slowestMs <= limits.database.request + 500, `slowest ${drive.slowestMs} ms`)
    const check = postgres(cluster.urlOf(to), { max: 1, onnotice: () => {} })
    cluster.cleanup.after(() => check.end())
    assert.deepEqual(await lostAcknowledgements(check, drive.acknowledged), [])
  }

  test('a planned switchover (Patroni 3, synchronous replica) under 8 keep-alive clients, the service on a URL listing both members: no create answered 503, none slower than the deadline + 0.5 s, none lost', () =>
    switchoverUnderLoad('multi-host URL'))

  test('a planned switchover (Patroni 3, synchronous replica) under 8 keep-alive clients, the service behind HAProxy (GET /primary, on-marked-down shutdown-sessions): no create answered 503, none slower than the deadline + 0.5 s, none lost', () =>
    switchoverUnderLoad('HAProxy'))
})
