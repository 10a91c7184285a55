import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { runMain } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

// The service as a role that may only do what it must: INSERT and SELECT on plants, SELECT on
// api_tokens and on the migrations table, UPDATE of api_tokens.last_used_at, LISTEN. The tables belong to another role, which
// migrates (here the suite's superuser); the service starts with MIGRATE=off.

const db = await createTestDatabase({ after })
const name = new URL(db.url).pathname.slice(1)
const role = `plant_app_${randomBytes(4).toString('hex')}`
const password = randomBytes(12).toString('hex')
// The README's grants, word for word but for the names.
await db.sql.unsafe(`create role ${role} login password '${password}'`)
await db.sql.unsafe(`grant connect on database ${name} to ${role}`)
await db.sql.unsafe(`grant usage on schema public to ${role}`)
await db.sql.unsafe(`grant select, insert on plants to ${role}`)
await db.sql.unsafe(`grant select on api_tokens, pgmigrations to ${role}`)
await db.sql.unsafe(`grant update (last_used_at) on api_tokens to ${role}`)
after(async () => {
  // After the database is gone (its after hook ran first), the role holds nothing.
  const admin = postgres(db.url.replace(`/${name}`, '/postgres'), { max: 1, onnotice: () => {} })
  await admin.unsafe(`drop role if exists ${role}`)
  await admin.end()
})
const appUrl = new URL(db.url)
appUrl.username = role
appUrl.password = password

describe('least privilege: the service as a role that may only insert and read', () => {
  test('it starts with MIGRATE=off and serves: a create, a retry, a 40009, and a token made, used (its last use recorded) and revoked by the owner', async () => {
    const s = await startTestServer(
      { after },
      { db: { url: appUrl.toString(), sql: db.sql }, env: { MIGRATE: 'off' } },
    )
    const id = uniqueId()
    assert.equal((await s.post({ id, name: 'Least', tag: 'privilege' })).status, 200)
    assert.equal((await s.post({ id, name: 'Least', tag: 'privilege' })).status, 200)
    const conflict = await s.post({ id, name: 'Other' })
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)
    // The owner makes a token; the restricted service hears of it through LISTEN alone.
    const tokenName = `owner-made-${uniqueId()}`
    const token = `pst_${randomBytes(32).toString('base64url').slice(0, 43)}`
    const { createHash } = await import('node:crypto')
    await db.sql`insert into api_tokens (name, token_sha256)
      values (${tokenName}, ${createHash('sha256').update(token).digest()})`
    await within(
      1000,
      async () => (await s.post({ id: uniqueId(), name: 'new' }, { token })).status === 200,
    )
    // Its use is recorded, by the restricted role.
    await within(3000, async () => {
      const [row] = await db.sql`select last_used_at from api_tokens where name = ${tokenName}`
      return row?.last_used_at instanceof Date
    })
    await db.sql`update api_tokens set revoked_at = now() where name = ${tokenName}`
    await within(
      1000,
      async () => (await s.post({ id: uniqueId(), name: 'gone' }, { token })).status === 401,
    )
  })

  test('the role cannot UPDATE, DELETE, DROP or CREATE', async () => {
    const app = postgres(appUrl.toString(), { max: 1, onnotice: () => {} })
    after(() => app.end())
    for (const statement of [
      `update plants set name = 'x'`,
      'delete from plants',
      'drop table plants',
      `update api_tokens set revoked_at = null`,
      `update api_tokens set expires_at = null`,
      `update api_tokens set last_used_at = now(), revoked_at = null`,
      'create table intruder (id int)',
    ]) {
      await assert.rejects(
        app.unsafe(statement),
        (err: { code?: string }) => err.code === '42501',
        statement,
      )
    }
  })

  test('with MIGRATE=off and a migration pending, it refuses to start with one line that says so', async () => {
    const [last] = await db.sql<{ name: string }[]>`
      delete from pgmigrations where id = (select max(id) from pgmigrations) returning name`
    after(() => db.sql`insert into pgmigrations (name, run_on) values (${last?.name ?? ''}, now())`)
    const { code, stdout } = await runMain([], {
      DATABASE_URL: appUrl.toString(),
      MIGRATE: 'off',
      PORT: '0',
    })
    assert.equal(code, 1)
    const lines = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { message: string; error?: string })
    assert.equal(lines.length, 1, stdout)
    assert.equal(lines[0]?.message, 'the service did not start')
    assert.match(
      lines[0]?.error ?? '',
      new RegExp(
        `the schema is not current \\(MIGRATE=off\\): 1 migration\\(s\\) pending, ${last?.name}; run npm run migrate as the tables' owner$`,
      ),
    )
    assert.ok(!stdout.includes(password))
  })

  test('npm run grant makes such a role (again and again), and the service runs as it', async () => {
    const made = `plant_made_${randomBytes(4).toString('hex')}`
    const secret = randomBytes(12).toString('hex')
    for (let run = 0; run < 2; run++) {
      const { code, stderr } = await runMain(['grant', made], {
        DATABASE_URL: db.url,
        APP_ROLE_PASSWORD: secret,
      })
      assert.equal(code, 0, stderr)
      assert.ok(!stderr.includes(secret))
    }
    const url = new URL(db.url)
    url.username = made
    url.password = secret
    const s = await startTestServer(
      { after },
      { db: { url: url.toString(), sql: db.sql }, env: { MIGRATE: 'off' } },
    )
    assert.equal((await s.post({ id: uniqueId(), name: 'granted' })).status, 200)
    const app = postgres(url.toString(), { max: 1, onnotice: () => {} })
    try {
      await assert.rejects(
        app.unsafe('delete from plants'),
        (err: { code?: string }) => err.code === '42501',
      )
    } finally {
      await app.end()
      await s.close()
      // Its grants first (in this database and on it), then the role.
      await db.sql.unsafe(`drop owned by ${made}`)
      await db.sql.unsafe(`drop role ${made}`)
    }
  })
})
