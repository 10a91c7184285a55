import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { symlink } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { projectDir, runMain, runNpm } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'
import { startServiceProcess } from './helpers/process.ts'
import { uniqueId } from './helpers/server.ts'
import { tempDir } from './helpers/temp-dir.ts'
import { within } from './helpers/wait.ts'

// The last commit before tokens had a checksum, a lifetime, rotation and a last use (issue 30):
// its tokens are `pst_` and 43 base64url characters, and api_tokens has no expires_at.
const before = '1e5b1b1656a243da97cd671a75f11590a471f611'

/** That version's tree in a folder of its own, sharing this checkout's node_modules. */
async function oldCheckout(): Promise<string> {
  const { dir } = await tempDir({ after }, 'plant-store-before-lifetimes-')
  const tar = execFileSync('git', ['archive', '--format=tar', before], {
    cwd: projectDir,
    maxBuffer: 256 * 1024 * 1024,
  })
  execFileSync('tar', ['-x', '-C', dir], { input: tar })
  await symlink(join(projectDir, 'node_modules'), join(dir, 'node_modules'))
  return dir
}

async function status(base: string, token: string): Promise<number> {
  const res = await fetch(`${base}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ id: uniqueId(), name: 'upgrade' }),
  })
  await res.arrayBuffer()
  return res.status
}

describe('upgrading to tokens with a lifetime, on a live database', () => {
  test('a token made by the version before keeps working through npm run migrate while that version serves, and after it: it never expires, list says so, the start-up warning names it', async () => {
    const dir = await oldCheckout()
    const db = await createTestDatabase({ after }, { migrated: false })
    const env = { DATABASE_URL: db.url }
    const old = await startServiceProcess('node', env, { after }, { cwd: dir })
    const made = await runMain(['token', 'create', 'legacy'], env, 'node', dir)
    assert.equal(made.code, 0, made.stderr)
    const legacy = made.stdout.trim()
    assert.match(legacy, /^pst_[A-Za-z0-9_-]{43}$/)
    await within(1000, async () => (await status(old.base, legacy)) === 200)

    // Creates go on against the old version while this version's migrations run beside them.
    let migrating = true
    const statuses: number[] = []
    const load = (async () => {
      while (migrating) statuses.push(await status(old.base, legacy))
    })()
    const migrated = await runNpm('migrate', [], env)
    migrating = false
    await load
    assert.equal(migrated.code, 0, migrated.stderr)
    assert.ok(statuses.length > 0)
    assert.deepEqual(new Set(statuses), new Set([200]))
    assert.equal(await status(old.base, legacy), 200)

    // The new version beside the old one: the legacy token works on both.
    const current = await startServiceProcess('node', env, { after })
    assert.equal(await status(current.base, legacy), 200)
    const warning = current.lines.find((l) => String(l.message).includes('never expire'))
    assert.equal(warning?.tokens, 'legacy')
    const listed = await runMain(['token', 'list'], env)
    assert.match(listed.stdout, /^legacy\t\S+Z\tnever\t\S+\tactive$/m)
    assert.ok(!JSON.stringify(current.lines).includes(legacy))
    // A token made by the new version works on the old one too, and a revocation reaches both.
    const fresh = (await runMain(['token', 'create', `new-${uniqueId()}`], env)).stdout.trim()
    await within(1000, async () => (await status(old.base, fresh)) === 200)
    assert.equal((await runMain(['token', 'revoke', 'legacy'], env)).code, 0)
    await within(1000, async () => {
      const [a, b] = await Promise.all([status(old.base, legacy), status(current.base, legacy)])
      return a === 401 && b === 401
    })
  })
})
