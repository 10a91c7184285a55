import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { parseConfig } from '../src/config.ts'
import { freePort } from '../src/db/start/embedded.ts'
import { createLog } from '../src/log.ts'
import { startService } from '../src/service.ts'
import { runNpm } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'
import { pgbouncerPath, pgbouncerPresent, startPgBouncer } from './helpers/pgbouncer.ts'
import { connect, startPrimaryAndStandby } from './helpers/replication.ts'
import { uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

// `npm run migrate` and `npm run token` as an operator runs them, as child processes, on each
// kind of database the README documents, and a token made so used on a running service.

const quiet = createLog('error', () => {})

async function startOn(env: Record<string, string>) {
  const service = await startService(parseConfig({ ...env, PORT: '0' }), quiet)
  after(() => service.close(0))
  const status = async (token: string) => {
    const res = await fetch(`${service.url}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: uniqueId(), name: 'operator fern' }),
    })
    await res.arrayBuffer()
    return res.status
  }
  return { service, status }
}

/** token create, list and revoke through npm, each checked on the running service by `status`. */
async function tokenRoundTrip(
  env: Record<string, string>,
  status: (token: string) => Promise<number>,
): Promise<string> {
  const name = `operator-${uniqueId()}`
  const created = await runNpm('token', ['create', name], env)
  assert.equal(created.code, 0, created.stderr)
  assert.match(created.stdout, /^pst_[0-9A-Za-z]{49}\n$/)
  const token = created.stdout.trim()
  await within(1000, async () => (await status(token)) === 200)
  // Used once by the check above: LAST USED shows it.
  const listed = await runNpm('token', ['list'], env)
  assert.equal(listed.code, 0, listed.stderr)
  assert.match(listed.stdout, new RegExp(`^${name}\\t\\S+Z\\t\\S+Z\\t\\S+Z\\tactive$`, 'm'))
  const revoked = await runNpm('token', ['revoke', name], env)
  assert.equal(revoked.code, 0, revoked.stderr)
  await within(1000, async () => (await status(token)) === 401)
  return name
}

describe('npm run migrate and npm run token on every documented database', () => {
  test('several hosts, the standby listed first, with target_session_attrs=read-write: the commands write to the primary and the running service takes their token', async () => {
    const { primary, standby } = await startPrimaryAndStandby({ after })
    const env = {
      DATABASE_URL: `postgres://postgres@127.0.0.1:${standby.port},127.0.0.1:${primary.port}/plants?target_session_attrs=read-write`,
    }
    const migrated = await runNpm('migrate', [], env)
    assert.equal(migrated.code, 0, migrated.stderr)
    assert.match(migrated.stdout, /^up: \d+_/)
    assert.equal((await runNpm('migrate', [], env)).stdout, 'no migrations to run\n')
    const { status } = await startOn(env)
    const name = await tokenRoundTrip(env, status)
    // Written on the primary, and streamed to the standby from there.
    for (const port of [primary.port, standby.port]) {
      const sql = connect(port)
      const [row] = await sql`select revoked_at is not null as revoked from api_tokens
        where name = ${name}`
      await sql.end()
      assert.deepEqual(row, { revoked: true }, `port ${port}`)
    }
  })

  test('several hosts and none writable: each command stops with exit 1 and one line that says so', async () => {
    const { standby } = await startPrimaryAndStandby({ after })
    const closed = await freePort()
    const env = {
      DATABASE_URL: `postgres://postgres@127.0.0.1:${standby.port},127.0.0.1:${closed}/plants?target_session_attrs=read-write`,
    }
    for (const args of [['migrate'], ['token', 'create', 'nowhere'], ['token', 'list']]) {
      const [script = '', ...rest] = args
      const { code, stdout, stderr } = await runNpm(script, rest, env)
      assert.equal(code, 1, args.join(' '))
      assert.equal(stdout, '')
      const ours = stderr.split('\n').filter((l) => l.startsWith('plant-store:'))
      assert.equal(ours.length, 1, stderr)
      assert.match(
        ours[0] ?? '',
        new RegExp(
          `^plant-store: cannot use the database at .+: no writable server among the hosts \\(127\\.0\\.0\\.1:${standby.port} does not take writes; 127\\.0\\.0\\.1:${closed}: .+\\)$`,
        ),
      )
    }
  })

  test('with DATABASE_DIRECT_URL set, an unreachable DATABASE_URL stops each command with one line naming DATABASE_URL, not DATABASE_DIRECT_URL', async () => {
    const db = await createTestDatabase({ after })
    const closed = await freePort()
    const env = {
      DATABASE_URL: `postgres://plants:s3cret@127.0.0.1:${closed}/plants`,
      DATABASE_DIRECT_URL: db.url,
    }
    for (const args of [['migrate'], ['token', 'list']]) {
      const [script = '', ...rest] = args
      const { code, stderr } = await runNpm(script, rest, env)
      assert.equal(code, 1, args.join(' '))
      const ours = stderr.split('\n').filter((l) => l.startsWith('plant-store:'))
      assert.equal(ours.length, 1, stderr)
      assert.match(
        ours[0] ?? '',
        new RegExp(
          `^plant-store: cannot use the database at 127\\.0\\.0\\.1:${closed}/plants as plants: .*ECONNREFUSED`,
        ),
      )
      assert.ok(!stderr.includes('s3cret'), 'the password is never shown')
    }
  })

  test('through PgBouncer in transaction mode with DATABASE_DIRECT_URL: the commands use the direct session and the running service takes their token', {
    skip: !pgbouncerPresent && !process.env.CI ? `no PgBouncer at ${pgbouncerPath}` : false,
  }, async () => {
    assert.ok(pgbouncerPresent, `CI needs ${pgbouncerPath} (apt-get install pgbouncer)`)
    const db = await createTestDatabase({ after }, { migrated: false })
    const name = new URL(db.url).pathname.slice(1)
    await db.sql.unsafe(`alter database ${name} set statement_timeout = '5s'`)
    const bouncer = await startPgBouncer(db.url, { after })
    const env = {
      DATABASE_URL: bouncer.url,
      DATABASE_POOL_MODE: 'transaction',
      DATABASE_DIRECT_URL: db.url,
    }
    const migrated = await runNpm('migrate', [], env)
    assert.equal(migrated.code, 0, migrated.stderr)
    assert.match(migrated.stdout, /^up: \d+_/)
    const { status } = await startOn(env)
    await tokenRoundTrip(env, status)
  })
})
