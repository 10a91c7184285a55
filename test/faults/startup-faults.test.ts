import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { freePort } from '../../src/db/embedded.ts'
import { runMain } from '../helpers/cli.ts'
import { createTestDatabase } from '../helpers/database.ts'
import { startServiceProcess } from '../helpers/process.ts'

function startLine(stdout: string): string {
  const lines = stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { level: string; message: string })
  const failed = lines.find((l) => l.level === 'error')
  assert.ok(failed, stdout)
  return failed.message
}

describe('start-up faults', () => {
  test('an unreachable database stops the start at once with a clear message and exit status 1', async () => {
    const port = await freePort()
    const started = performance.now()
    const { code, stdout } = await runMain([], {
      DATABASE_URL: `postgres://plants:s3cret@127.0.0.1:${port}/plants`,
      PORT: '0',
    })
    assert.equal(code, 1)
    assert.ok(performance.now() - started < 10_000)
    const message = startLine(stdout)
    assert.match(
      message,
      new RegExp(
        `cannot use the database at 127\\.0\\.0\\.1:${port}/plants as plants: .*ECONNREFUSED`,
      ),
    )
    assert.ok(!stdout.includes('s3cret'), 'the password is never shown')
  })

  test('a wrong password stops the start with a clear message and exit status 1, without the password', async () => {
    const db = await createTestDatabase({ after })
    const url = new URL(db.url)
    url.password = 'wrong-password-123'
    const { code, stdout } = await runMain([], { DATABASE_URL: url.toString(), PORT: '0' })
    assert.equal(code, 1)
    assert.match(startLine(stdout), /cannot use the database at .*: password authentication failed/)
    assert.ok(!stdout.includes('wrong-password-123'))
  })

  test('three instances starting at the same moment on an empty database all migrate and serve', async () => {
    const db = await createTestDatabase({ after }, { migrated: false })
    const services = await Promise.all(
      [1, 2, 3].map(() => startServiceProcess('node', { DATABASE_URL: db.url }, { after })),
    )
    for (const s of services) assert.equal((await fetch(`${s.base}/readyz`)).status, 200)
    const ran = services.flatMap((s) => s.lines.filter((l) => l.message === 'migrations up'))
    assert.equal(ran.length, 1, 'exactly one instance ran the migrations')
    const [{ count }] =
      (await db.sql`select count(*)::int as count from pgmigrations`) as unknown as [
        { count: number },
      ]
    assert.equal(count, 2)
  })
})
