import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { parseConfig } from '../src/config.ts'
import { freePort } from '../src/db/embedded.ts'
import { createLog } from '../src/log.ts'
import { startService } from '../src/service.ts'
import { createTestDatabase } from './helpers/database.ts'
import { tokenFor } from './helpers/process.ts'
import { uniqueId } from './helpers/server.ts'
import { tempDir } from './helpers/temp-dir.ts'
import { within } from './helpers/wait.ts'

// Debian's pgbouncer package. Outside CI a machine without it skips this test; in CI its
// absence is a failure (.ci/run installs it).
const pgbouncer = process.env.PGBOUNCER_PATH || '/usr/sbin/pgbouncer'
const present = existsSync(pgbouncer)
const skip = !present && !process.env.CI ? `no PgBouncer at ${pgbouncer}` : false

/** Starts PgBouncer in transaction mode in front of the server of `directUrl`. */
async function startPgBouncer(directUrl: string, t: { after: (fn: () => unknown) => void }) {
  const direct = new URL(directUrl)
  const { dir, ...tmp } = await tempDir(t, 'plant-store-pgbouncer-')
  const port = await freePort()
  const user = decodeURIComponent(direct.username)
  await writeFile(join(dir, 'userlist.txt'), `"${user}" ""\n`)
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      // Every database name goes to the same one on the server, as the test's user.
      `* = host=${direct.hostname} port=${direct.port} user=${user} password=${decodeURIComponent(direct.password)}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'default_pool_size = 2',
      'max_client_conn = 100',
      `admin_users = ${user}`,
      '',
    ].join('\n'),
  )
  // PgBouncer refuses to run as root; -u drops to the postgres user. It logs to standard error.
  const asRoot = process.getuid?.() === 0 ? ['-u', 'postgres'] : []
  const child: ChildProcess = spawn(pgbouncer, [...asRoot, join(dir, 'pgbouncer.ini')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let output = ''
  child.stderr?.on('data', (c: Buffer) => {
    output += c.toString()
  })
  const exited = new Promise((r) => child.on('exit', r))
  tmp.after(async () => {
    child.kill('SIGINT')
    await exited
  })
  await within(10_000, () => canConnect(port)).catch(() => {
    throw new Error(`PgBouncer did not listen: ${output.slice(-1000)}`)
  })
  const pooled = new URL(directUrl)
  pooled.hostname = '127.0.0.1'
  pooled.port = String(port)
  return { url: pooled.toString(), port, user }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

describe('behind PgBouncer in transaction mode (DATABASE_POOL_MODE=transaction)', () => {
  test('the contract holds through a real PgBouncer: 200, retry, 40009, 40005, 401, concurrent creates, and a revocation within 1 s', {
    skip,
  }, async () => {
    assert.ok(present, `CI needs ${pgbouncer} (apt-get install pgbouncer)`)
    const db = await createTestDatabase({ after })
    const name = new URL(db.url).pathname.slice(1)
    // Through the pooler the service cannot send statement_timeout; the database carries it.
    await db.sql.unsafe(`alter database ${name} set statement_timeout = '5s'`)
    const bouncer = await startPgBouncer(db.url, { after })
    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>))
    const config = parseConfig({
      DATABASE_URL: bouncer.url,
      DATABASE_POOL_MODE: 'transaction',
      DATABASE_DIRECT_URL: db.url,
      PORT: '0',
    })
    const service = await startService(config, log)
    after(() => service.close())
    assert.ok(!lines.some((l) => String(l.message).startsWith('statement_timeout is')))
    const tokenName = `bouncer-${uniqueId()}`
    const token = await tokenFor(db.sql, service.url, tokenName)
    const post = (body: unknown, bearer = token) =>
      fetch(`${service.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })

    const id = uniqueId()
    assert.equal((await post({ id, name: 'Pooled fern', tag: 'pgbouncer' })).status, 200)
    assert.equal((await post({ id, name: 'Pooled fern', tag: 'pgbouncer' })).status, 200)
    const conflict = await post({ id, name: 'Other' })
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)
    const invalid = await post({ id: 'x', name: '' })
    assert.equal(((await invalid.json()) as { error: number }).error, 40005)
    assert.equal((await post({ id: uniqueId(), name: 'x' }, 'pst_unknown')).status, 401)
    // Rounds of concurrent creates spread the pool's statements over PgBouncer's two server
    // connections: a prepared statement would meet a server connection that never saw it.
    const ids: number[] = []
    const statuses: number[] = []
    for (let round = 0; round < 6; round++) {
      const batch = Array.from({ length: 50 }, () => uniqueId())
      ids.push(...batch)
      statuses.push(
        ...(await Promise.all(
          batch.map(async (i) => (await post({ id: i, name: `many ${i}` })).status),
        )),
      )
    }
    assert.deepEqual(new Set(statuses), new Set([200]))
    const [{ count }] =
      (await db.sql`select count(*)::int as count from plants where id = any(${ids.map(String)}::int8[])`) as unknown as [
        { count: number },
      ]
    assert.equal(count, 300)

    // The statements went through PgBouncer: its own statistics count them.
    const admin = postgres(`postgres://${bouncer.user}@127.0.0.1:${bouncer.port}/pgbouncer`, {
      max: 1,
      prepare: false,
      fetch_types: false,
      onnotice: () => {},
    })
    after(() => admin.end({ timeout: 1 }))
    const stats = await admin.unsafe('SHOW STATS').simple()
    const mine = (stats as unknown as { database: string; total_xact_count: string }[]).find(
      (r) => r.database === name,
    )
    // Concurrent creates share statements: fewer transactions than creates, but some.
    assert.ok(
      Number(mine?.total_xact_count) > 0,
      `PgBouncer counted ${mine?.total_xact_count} transactions`,
    )

    // A revocation: NOTIFY reaches the LISTEN on the direct connection; the reload goes through
    // the pooler.
    const revoked = Date.now()
    await db.sql`update api_tokens set revoked_at = now() where name = ${tokenName}`
    await within(
      1000,
      async () => (await post({ id: uniqueId(), name: 'after revoke' })).status === 401,
    )
    assert.ok(Date.now() - revoked <= 1500)
  })
})
