import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { after, describe, test } from 'node:test'
import zlib from 'node:zlib'
import { runMain, runTokenHere } from './helpers/cli.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

const s = await startTestServer({ after })
const env = { DATABASE_URL: s.db.url }

// The first test runs the command as the process `npm run token` starts (`runMain`); the rest
// run the same command in this process (`runTokenHere`), without a Node start each.

async function statusWith(token: string): Promise<number> {
  return (await s.post({ id: uniqueId(), name: 'probe' }, { token })).status
}

describe('npm run token -- create | list | revoke', () => {
  test('create prints the new token alone on one line; the database keeps only its SHA-256', async () => {
    const name = `cli-${uniqueId()}`
    const { code, stdout } = await runMain(['token', 'create', name], env)
    assert.equal(code, 0)
    assert.match(stdout, /^pst_[0-9A-Za-z]{49}\n$/)
    const token = stdout.trim()
    const [row] = await s.db.sql`select token_sha256 from api_tokens where name = ${name}`
    assert.deepEqual(
      Buffer.from(row?.token_sha256 as Uint8Array),
      createHash('sha256').update(token).digest(),
    )
    const everything = JSON.stringify(await s.db.sql`select * from api_tokens`)
    assert.ok(!everything.includes(token))
  })

  test('a created token works on a running instance within 1 s, through LISTEN/NOTIFY alone', async () => {
    const name = `notify-${uniqueId()}`
    const { stdout } = await runTokenHere(['create', name], env)
    const token = stdout.trim()
    const ms = await within(1000, async () => (await statusWith(token)) === 200)
    assert.ok(ms < 1000)
  })

  test('a revoked token fails on a running instance within 1 s', async () => {
    const name = `revoke-${uniqueId()}`
    const token = (await runTokenHere(['create', name], env)).stdout.trim()
    await within(1000, async () => (await statusWith(token)) === 200)
    const revoked = await runTokenHere(['revoke', name], env)
    assert.equal(revoked.code, 0)
    const ms = await within(1000, async () => (await statusWith(token)) === 401)
    assert.ok(ms < 1000)
  })

  test('list shows NAME, CREATED, EXPIRES, LAST USED and a state, one line per token, never a token or digest', async () => {
    const name = `listed-${uniqueId()}`
    const token = (await runTokenHere(['create', name], env)).stdout.trim()
    const never = `listed-never-${uniqueId()}`
    await runTokenHere(['create', never, '--expires-in', 'never'], env)
    const soon = `listed-soon-${uniqueId()}`
    await runTokenHere(['create', soon, '--expires-in', '3d'], env)
    const gone = `listed-gone-${uniqueId()}`
    await runTokenHere(['create', gone], env)
    await runTokenHere(['revoke', gone], env)
    const { code, stdout } = await runTokenHere(['list'], env)
    assert.equal(code, 0)
    const lines = stdout.trim().split('\n')
    assert.equal(lines[0], 'NAME\tCREATED\tEXPIRES\tLAST USED\tSTATE')
    const line = (n: string) => lines.find((l) => l.startsWith(`${n}\t`)) ?? ''
    const iso = '\\d{4}-\\d\\d-\\d\\dT\\S+Z'
    assert.match(line(name), new RegExp(`^${name}\\t${iso}\\t${iso}\\tnever\\tactive$`))
    assert.match(line(never), new RegExp(`^${never}\\t${iso}\\tnever\\tnever\\tactive$`))
    assert.match(line(soon), new RegExp(`^${soon}\\t${iso}\\t${iso}\\tnever\\texpires in 3d$`))
    assert.match(line(gone), new RegExp(`^${gone}\\t${iso}\\t${iso}\\tnever\\trevoked$`))
    assert.ok(!stdout.includes(token))
  })

  test('create gives a token 90 days by default, or --expires-in, and prints the expiry beside it', async () => {
    const byDefault = `life-${uniqueId()}`
    const made = await runTokenHere(['create', byDefault], env)
    assert.equal(made.code, 0)
    assert.match(made.stdout, /^pst_[0-9A-Za-z]{49}\n$/)
    assert.match(
      made.stderr,
      new RegExp(`created token ${byDefault}, expiring \\d{4}-\\S+Z \\(in 90 days\\)`),
    )
    const short = `life-${uniqueId()}`
    const twelve = await runTokenHere(['create', short, '--expires-in', '12h'], env)
    assert.match(twelve.stderr, /\(in 12 hours\)/)
    const rows = await s.db.sql<{ name: string; days: number }[]>`
      select name, extract(epoch from expires_at - created_at) / 86400 as days
      from api_tokens where name in (${byDefault}, ${short}) order by days desc`
    assert.deepEqual(
      rows.map((r) => [r.name, Math.round(r.days * 24)]),
      [
        [byDefault, 90 * 24],
        [short, 12],
      ],
    )
  })

  test('create refuses more than 365 days, no time at all, or a duration it cannot read: exit 1, one line, nothing created', async () => {
    for (const given of ['366d', '0s', '3 weeks', '90']) {
      const name = `refused-${uniqueId()}`
      const r = await runTokenHere(['create', name, '--expires-in', given], env)
      assert.equal(r.code, 1, given)
      assert.equal(r.stdout, '')
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr)
      assert.equal((await s.db.sql`select 1 from api_tokens where name = ${name}`).length, 0)
    }
    const year = await runTokenHere(['create', `year-${uniqueId()}`, '--expires-in', '365d'], env)
    assert.equal(year.code, 0)
  })

  test('create --expires-in never is allowed and warned about', async () => {
    const name = `never-${uniqueId()}`
    const r = await runTokenHere(['create', name, '--expires-in', 'never'], env)
    assert.equal(r.code, 0)
    assert.match(r.stderr, /never expires: a leaked copy works until it is revoked/)
    const [row] = await s.db.sql`select expires_at from api_tokens where name = ${name}`
    assert.equal(row?.expires_at, null)
  })

  test('a token whose expiry passes while the service runs is refused within 1 s, 401/40103 with error_description, with no notification', async () => {
    const name = `expiring-${uniqueId()}`
    const r = await runTokenHere(['create', name, '--expires-in', '3s'], env)
    const token = r.stdout.trim()
    await within(1000, async () => (await statusWith(token)) === 200)
    const [row] = await s.db.sql<
      { at: Date }[]
    >`select expires_at as at from api_tokens where name = ${name}`
    const expiresAt = row?.at.getTime() ?? 0
    // No change to api_tokens at expiry: nothing notifies the instances.
    await new Promise((done) => setTimeout(done, Math.max(0, expiresAt - Date.now())))
    const ms = await within(1000, async () => (await statusWith(token)) === 401)
    assert.ok(ms < 1000)
    const res = await fetch(`${s.base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{}',
    })
    assert.equal(res.status, 401)
    assert.equal(((await res.json()) as { error: number }).error, 40103)
    assert.equal(
      res.headers.get('www-authenticate'),
      'Bearer realm="plants", error="invalid_token", error_description="the token expired"',
    )
  })

  test('create refuses a name that exists, even revoked; names are never reused', async () => {
    const name = `dup-${uniqueId()}`
    await runTokenHere(['create', name], env)
    const again = await runTokenHere(['create', name], env)
    assert.equal(again.code, 1)
    assert.equal(again.stdout, '')
    assert.match(again.stderr, /exists already/)
  })

  test('create refuses an invalid name; revoke refuses an unknown one; bad usage exits 1', async () => {
    const bad = await runTokenHere(['create', 'has space'], env)
    assert.equal(bad.code, 1)
    assert.match(bad.stderr, /must be 1 to 64 characters/)
    const unknown = await runTokenHere(['revoke', `ghost-${uniqueId()}`], env)
    assert.equal(unknown.code, 1)
    assert.match(unknown.stderr, /no token is named/)
    const usage = await runTokenHere(['frobnicate'], env)
    assert.equal(usage.code, 1)
    assert.match(usage.stderr, /usage/)
  })

  test('tokens are pst_, 43 random base62 characters (256 bits) and their CRC32 in 6 base62 characters, all different', async () => {
    const tokens = new Set<string>()
    for (let i = 0; i < 3; i++)
      tokens.add((await runTokenHere(['create', `rand-${uniqueId()}`], env)).stdout.trim())
    assert.equal(tokens.size, 3)
    const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
    for (const t of tokens) {
      assert.match(t, /^pst_[0-9A-Za-z]{49}$/)
      // The checksum, recomputed with zlib's CRC32 as a secret scanner would.
      let n = zlib.crc32(t.slice(0, -6))
      let digits = ''
      for (; n > 0; n = Math.floor(n / 62)) digits = base62[n % 62] + digits
      assert.equal(t.slice(-6), digits.padStart(6, '0'))
    }
  })

  test('a lost notification is made up by the periodic reload', async () => {
    const { createTokenCache } = await import('../src/auth/token-cache.ts')
    const { createSql } = await import('../src/db/reach/sql.ts')
    const { quietLog } = await import('./helpers/database.ts')
    const sql = createSql(s.db.url, quietLog)
    after(() => sql.end())
    const cache = createTokenCache(sql, quietLog, 200)
    await cache.start()
    after(() => cache.close())
    const name = `silent-${uniqueId()}`
    const token = `pst_${uniqueId()}silentsilentsilentsilent`
    // Inserting with the notify trigger disabled for this transaction loses the notification.
    await s.db.sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`
      await tx`insert into api_tokens (name, token_sha256) values (${name}, ${createHash('sha256').update(token).digest()})`
    })
    await within(1000, async () => cache.verify(token)?.name === name)
  })
})
