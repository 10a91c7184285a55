import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { runMain } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'
import { startServiceProcess } from './helpers/process.ts'
import { within } from './helpers/wait.ts'

describe('two instances on one database', () => {
  test('start together on an empty database, refuse a duplicate id across instances, and see a revocation within 1 s', async () => {
    const db = await createTestDatabase({ after }, { migrated: false })
    // Both apply migrations at start; node-pg-migrate's lock makes one wait for the other.
    const [a, b] = await Promise.all([
      startServiceProcess('node', { DATABASE_URL: db.url }, { after }),
      startServiceProcess('node', { DATABASE_URL: db.url }, { after }),
    ])
    const token = (
      await runMain(['token', 'create', 'shared'], { DATABASE_URL: db.url })
    ).stdout.trim()
    const post = (base: string, body: object) =>
      fetch(`${base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
    for (const s of [a, b])
      await within(
        1000,
        async () => (await post(s.base, { id: 1, name: 'warm-up' })).status === 200,
      )

    assert.equal((await post(a.base, { id: 2, name: 'Aster' })).status, 200)
    const conflict = await post(b.base, { id: 2, name: 'Begonia' })
    assert.equal(conflict.status, 400)
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)
    assert.equal(
      (await post(b.base, { id: 2, name: 'Aster' })).status,
      200,
      'a retry on the other instance',
    )
    assert.equal((await db.sql`select 1 from plants where id = 2`).length, 1)

    assert.equal((await runMain(['token', 'revoke', 'shared'], { DATABASE_URL: db.url })).code, 0)
    const revokedAt = performance.now()
    const [msA, msB] = await Promise.all(
      [a, b].map((s) =>
        within(1000, async () => (await post(s.base, { id: 3, name: 'x' })).status === 401),
      ),
    )
    assert.ok((msA ?? 0) < 1000 && (msB ?? 0) < 1000 && performance.now() - revokedAt < 1500)
  })
})
