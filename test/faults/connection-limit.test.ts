import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { createToken } from '../../src/auth/token-repository.ts'
import { parseConfig } from '../../src/config.ts'
import { startEmbedded } from '../../src/db/start/embedded.ts'
import { migrate } from '../../src/db/start/migrate.ts'
import { limits } from '../../src/limits.ts'
import { createLog } from '../../src/log.ts'
import { startService } from '../../src/service.ts'
import { seedEmbedded } from '../helpers/cluster-cache.ts'
import { quietLog } from '../helpers/database.ts'
import { driveCreates } from '../helpers/drive.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { sleep, within } from '../helpers/wait.ts'

describe('more instances than the server has connections for', () => {
  test('instances that cannot get every connection they want hold creates for a connection until the deadline (503 only then, never 500), stay up, and recover when connections free up', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-connection-limit-')
    // Seven connections: this test's own, and three for each instance once it serves (the
    // pool's first, the LISTEN, and one statement slot). A second slot needs an eighth.
    await seedEmbedded(dir)
    const db = await startEmbedded({
      dir,
      log: quietLog,
      shareRunning: false,
      fast: true,
      settings: { max_connections: '7' },
    })
    tmp.after(() => db.stop())
    await migrate(db.url, quietLog)
    const sql = postgres(db.url, { max: 1, onnotice: () => {} })
    tmp.after(() => sql.end())
    const token = await createToken(sql, 'limit')
    assert.equal(typeof token, 'string')

    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
    const config = parseConfig({ DATABASE_URL: db.url, PORT: '0' })
    const a = await startService(config, log)
    tmp.after(() => a.close())
    const b = await startService(config, log)
    tmp.after(() => b.close())

    const drives = [a, b].map((s) => driveCreates(s.url, String(token), { concurrency: 16 }))
    await sleep(2000)
    for (const d of drives) await d.stop()
    const statuses = new Map<number, number>()
    for (const d of drives)
      for (const [status, n] of d.statuses) statuses.set(status, (statuses.get(status) ?? 0) + n)
    // A create whose statement slot could not connect is held and sent again: it goes out on a
    // slot that has a connection, or is answered 503 at its deadline when its instance has none.
    assert.deepEqual(
      [...statuses.keys()].filter((status) => status !== 200 && status !== 503),
      [],
      `statuses: ${JSON.stringify([...statuses])}`,
    )
    assert.ok((statuses.get(200) ?? 0) > 0, 'no create was stored')
    for (const d of drives)
      for (const a of d.answers)
        if (a.status === 503)
          assert.ok(
            a.answeredAt - a.sentAt >= limits.database.request - 1000,
            `a 503 after ${Math.round(a.answeredAt - a.sentAt)} ms, before the deadline`,
          )
    assert.ok(
      lines.some(
        (l) =>
          String(l.message).startsWith('the database is unavailable') &&
          l.reason === 'too_many_connections' &&
          l.code === '53300',
      ),
      'the server refused a connection: too many clients',
    )
    assert.ok(!lines.some((l) => l.status === 500), 'a 500 was answered')
    for (const s of [a, b]) assert.equal((await fetch(`${s.url}/healthz`)).status, 200)

    // One instance stops; the other gets its connections and answers every create again.
    await a.close()
    const post = (id: number) =>
      fetch(`${b.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${String(token)}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id, name: 'after the limit' }),
      }).then((res) => res.status)
    await within(5000, async () => (await post(Date.now())) === 200)
    const recovered = await Promise.all(Array.from({ length: 50 }, (_, i) => post(9_000_000 + i)))
    assert.deepEqual(new Set(recovered), new Set([200]))
  })
})
