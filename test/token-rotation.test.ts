import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { watchTokenLifetimes } from '../src/auth/token-warnings.ts'
import { createLog } from '../src/log.ts'
import { runTokenHere } from './helpers/cli.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

const s = await startTestServer({ after })
const env = { DATABASE_URL: s.db.url }

async function answerTo(
  token: string,
): Promise<{ status: number; error?: number; headers: Headers }> {
  const res = await s.post({ id: uniqueId(), name: 'probe' }, { token })
  const body = (await res.json()) as { error?: number }
  return { status: res.status, headers: res.headers, ...(body.error && { error: body.error }) }
}

async function created(name: string, ...options: string[]): Promise<string> {
  const r = await runTokenHere(['create', name, ...options], env)
  assert.equal(r.code, 0, r.stderr)
  const token = r.stdout.trim()
  await within(1000, async () => (await answerTo(token)).status === 200)
  return token
}

async function listLines(...options: string[]): Promise<string[]> {
  const r = await runTokenHere(['list', ...options], env)
  assert.equal(r.code, 0, r.stderr)
  return r.stdout.trim().split('\n').slice(1)
}

describe('npm run token -- rotate | revoke | list, and warnings before a token expires', () => {
  test('rotate prints a new token for the same name; both work during the grace, and list shows the successor and its predecessor', async () => {
    const name = `rotated-${uniqueId()}`
    const old = await created(name)
    const r = await runTokenHere(['rotate', name], env)
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /^pst_[0-9A-Za-z]{49}\n$/)
    assert.match(
      r.stderr,
      new RegExp(
        `^rotated token ${name}: the new one is expiring \\S+Z \\(in 90 days\\); the old one keeps working until \\S+Z \\(in 24 hours\\), then is refused`,
      ),
    )
    const successor = r.stdout.trim()
    await within(1000, async () => (await answerTo(successor)).status === 200)
    assert.equal((await answerTo(old)).status, 200)
    // Both are the same name to the service: created_by names it.
    const rows = await s.db.sql`select distinct created_by from plants where created_by = ${name}`
    assert.equal(rows.length, 1)
    const lines = (await listLines()).filter((l) => l.startsWith(`${name}\t`))
    assert.equal(lines.length, 2, lines.join('\n'))
    assert.match(lines[0] ?? '', /\trotated: ends \d{4}-\S+Z$/)
    assert.match(lines[1] ?? '', /\tactive$/)
    const ends = Date.parse((lines[0] ?? '').split('rotated: ends ')[1] ?? '')
    assert.ok(Math.abs(ends - (Date.now() + 86_400_000)) < 60_000)
  })

  test('a grace that passes while the service runs ends the old token within 1 s, 401/40102, with no notification; the new one goes on', async () => {
    const name = `grace-${uniqueId()}`
    const old = await created(name)
    const r = await runTokenHere(['rotate', name, '--grace', '3s', '--expires-in', '30d'], env)
    assert.equal(r.code, 0, r.stderr)
    const successor = r.stdout.trim()
    await within(1000, async () => (await answerTo(successor)).status === 200)
    const [row] = await s.db.sql<{ ends: Date; expires: Date }[]>`
      select o.revoked_at as ends, n.expires_at as expires
      from api_tokens o join api_tokens n on n.replaces = o.id where n.name = ${name}`
    assert.ok(row)
    assert.ok(Math.abs(row.expires.getTime() - (Date.now() + 30 * 86_400_000)) < 60_000)
    assert.equal((await answerTo(old)).status, 200)
    await new Promise((done) => setTimeout(done, Math.max(0, row.ends.getTime() - Date.now())))
    const ms = await within(1000, async () => (await answerTo(old)).status === 401)
    assert.ok(ms < 1000)
    assert.equal((await answerTo(old)).error, 40102)
    assert.equal((await answerTo(successor)).status, 200)
    const lines = (await listLines()).filter((l) => l.startsWith(`${name}\t`))
    assert.deepEqual(
      lines.map((l) => l.split('\t')[4]),
      ['revoked', 'active'],
    )
  })

  test('rotate --grace 0s refuses the old token within 1 s', async () => {
    const name = `at-once-${uniqueId()}`
    const old = await created(name)
    const r = await runTokenHere(['rotate', name, '--grace', '0s'], env)
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stderr, /the old one is refused from now on/)
    await within(1000, async () => (await answerTo(old)).status === 401)
    await within(1000, async () => (await answerTo(r.stdout.trim())).status === 200)
  })

  test('revoke NAME ends every token of the name within 1 s, the one in its grace included', async () => {
    const name = `revoke-both-${uniqueId()}`
    const old = await created(name)
    const successor = (await runTokenHere(['rotate', name], env)).stdout.trim()
    await within(1000, async () => (await answerTo(successor)).status === 200)
    const r = await runTokenHere(['revoke', name], env)
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stderr, new RegExp(`every token named ${name} is revoked`))
    await within(1000, async () => {
      const [a, b] = await Promise.all([answerTo(old), answerTo(successor)])
      return a.error === 40102 && b.error === 40102
    })
    const states = (await listLines())
      .filter((l) => l.startsWith(`${name}\t`))
      .map((l) => l.split('\t')[4])
    assert.deepEqual(states, ['revoked', 'revoked'])
    // A revoked name is never used again, by rotate or create.
    const again = await runTokenHere(['rotate', name], env)
    assert.equal(again.code, 1)
    assert.equal(again.stdout, '')
    assert.match(again.stderr, /is revoked; a revoked name is never used again/)
    assert.equal((await runTokenHere(['create', name], env)).code, 1)
  })

  test('rotate refuses an unknown name, a grace over 7 days, a lifetime over 365 days or bad usage: exit 1, one line, nothing changed', async () => {
    const name = `refused-${uniqueId()}`
    const old = await created(name)
    // The service records the use created() made of it off the request path: once that is
    // written, nothing but a rotate could change the row.
    await within(5000, async () => {
      const [row] = await s.db.sql`select last_used_at from api_tokens where name = ${name}`
      return row?.last_used_at != null
    })
    const before = await s.db.sql`select * from api_tokens where name = ${name}`
    for (const args of [
      ['rotate', `ghost-${uniqueId()}`],
      ['rotate', name, '--grace', '8d'],
      ['rotate', name, '--grace', 'soon'],
      ['rotate', name, '--expires-in', '366d'],
      ['rotate', name, '--grace'],
      ['rotate', name, '--expiring', '1d'],
      ['rotate'],
    ]) {
      const r = await runTokenHere(args, env)
      assert.equal(r.code, 1, args.join(' '))
      assert.equal(r.stdout, '')
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr)
    }
    assert.deepEqual(await s.db.sql`select * from api_tokens where name = ${name}`, before)
    assert.equal((await answerTo(old)).status, 200)
    assert.equal((await runTokenHere(['rotate', name, '--grace', '7d'], env)).code, 0)
  })

  test('list --expiring DURATION shows only the tokens that work and expire within it', async () => {
    const soon = `exp-soon-${uniqueId()}`
    await created(soon, '--expires-in', '2d')
    const later = `exp-later-${uniqueId()}`
    await created(later, '--expires-in', '20d')
    const never = `exp-never-${uniqueId()}`
    await created(never, '--expires-in', 'never')
    const revoked = `exp-revoked-${uniqueId()}`
    await created(revoked, '--expires-in', '1d')
    await runTokenHere(['revoke', revoked], env)
    const names = (await listLines('--expiring', '3d')).map((l) => l.split('\t')[0])
    assert.ok(names.includes(soon))
    for (const n of [later, never, revoked]) assert.ok(!names.includes(n), n)
    const wider = (await listLines('--expiring', '21d')).map((l) => l.split('\t')[0])
    assert.ok(wider.includes(soon) && wider.includes(later))
    const bad = await runTokenHere(['list', '--expiring', 'a while'], env)
    assert.equal(bad.code, 1)
  })

  test('answers to a token that expires within 14 days carry Token-Expires, an HTTP date; other tokens get none', async () => {
    const soon = await created(`header-soon-${uniqueId()}`, '--expires-in', '13d')
    const answer = await answerTo(soon)
    const header = answer.headers.get('token-expires')
    assert.ok(header, 'Token-Expires is missing')
    assert.match(header, /^[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT$/)
    assert.ok(Math.abs(Date.parse(header) - (Date.now() + 13 * 86_400_000)) < 60_000)
    // On every answer to the token, a refusal after authentication included.
    const bad = await s.post('{', { token: soon })
    assert.equal(bad.status, 400)
    assert.equal(bad.headers.get('token-expires'), header)
    const later = await created(`header-later-${uniqueId()}`, '--expires-in', '15d')
    assert.equal((await answerTo(later)).headers.get('token-expires'), null)
    const never = await created(`header-never-${uniqueId()}`, '--expires-in', 'never')
    assert.equal((await answerTo(never)).headers.get('token-expires'), null)
  })

  test('plant_store_token_expiry_timestamp_seconds gives each name the expiry of its current token, none for a token that never expires', async () => {
    const name = `metric-${uniqueId()}`
    await created(name, '--expires-in', '5d')
    const successor = (await runTokenHere(['rotate', name, '--expires-in', '40d'], env)).stdout
    await within(1000, async () => (await answerTo(successor.trim())).status === 200)
    const never = `metric-never-${uniqueId()}`
    await created(never, '--expires-in', 'never')
    const text = await (await fetch(`${s.base}/metrics`)).text()
    const series = text.split('\n').filter((l) => l.includes(`token="${name}"`))
    assert.equal(series.length, 1, series.join('\n'))
    const value = Number(series[0]?.split(' ')[1])
    assert.ok(Math.abs(value - (Date.now() / 1000 + 40 * 86_400)) < 60)
    assert.ok(!text.includes(`token="${never}"`))
  })

  test('the service warns once at start and then daily, one line per token that expires within 14 days, naming it and not its secret', async () => {
    const soon = `warned-${uniqueId()}`
    const token = await created(soon, '--expires-in', '10d')
    const later = `unwarned-${uniqueId()}`
    await created(later, '--expires-in', '30d')
    const lines: {
      level: string
      message: string
      token?: string
      expiresAt?: string
      expiresIn?: string
    }[] = []
    const log = createLog('info', (line) => lines.push(JSON.parse(line)))
    const stop = await watchTokenLifetimes(s.db.sql, log, { everyMs: 300 })
    after(stop)
    const mine = () => lines.filter((l) => l.token === soon)
    assert.equal(mine().length, 1)
    assert.equal(mine()[0]?.level, 'warn')
    assert.equal(
      mine()[0]?.message,
      'a token expires soon: rotate it before then (npm run token -- rotate NAME)',
    )
    assert.match(mine()[0]?.expiresAt ?? '', /^\S+Z$/)
    assert.equal(mine()[0]?.expiresIn, 'in 10 days')
    await within(2000, async () => mine().length >= 2)
    assert.ok(!lines.some((l) => l.token === later))
    assert.ok(!JSON.stringify(lines).includes(token))
  })
})
