import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { cp, readFile, symlink } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { projectDir } from '../helpers/cli.ts'
import { type Cleanup, createTestDatabase } from '../helpers/database.ts'
import { driveCreates, lostAcknowledgements, underWay } from '../helpers/drive.ts'
import { isRunning, startServiceProcess, tokenFor } from '../helpers/process.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { within } from '../helpers/wait.ts'

/**
 * A copy of the project in a temporary folder, so that its `.data/` is the test's own. Its
 * `after` runs before the folder is removed, and an embedded PostgreSQL left running there by a
 * killed service is stopped first, whatever the test did.
 */
async function projectCopy(): Promise<{ dir: string } & Cleanup> {
  const { dir, ...tmp } = await tempDir({ after }, 'plant-store-copy-')
  tmp.after(() => stopLeftoverPostgres(join(dir, '.data', 'postgres')))
  for (const entry of ['src', 'migrations', 'package.json', 'tsconfig.json']) {
    await cp(join(projectDir, entry), join(dir, entry), { recursive: true })
  }
  await symlink(join(projectDir, 'node_modules'), join(dir, 'node_modules'))
  return { dir, ...tmp }
}

// PostgreSQL removes its postmaster.pid when a fast shutdown (SIGINT) is complete.
async function stopLeftoverPostgres(dataDir: string): Promise<void> {
  const pidFile = join(dataDir, 'postmaster.pid')
  const pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).split('\n')[0])
  if (!(pid > 0)) return
  try {
    process.kill(pid, 'SIGINT')
  } catch {
    return
  }
  await within(30_000, async () => !existsSync(pidFile))
}

describe('durability under kill -9', () => {
  test('every create answered 200 before a SIGKILL is stored as sent (DATABASE_URL)', async () => {
    const db = await createTestDatabase({ after })
    const first = await startServiceProcess('node', { DATABASE_URL: db.url }, { after })
    const token = await tokenFor(db.sql, first.base, 'durability')
    const drive = driveCreates(first.base, token, { concurrency: 32, untilError: true })
    await underWay(drive)
    first.child.kill('SIGKILL')
    await first.exited
    await drive.stop()
    assert.ok(
      drive.acknowledged.length > 100,
      `only ${drive.acknowledged.length} creates were acknowledged`,
    )

    const second = await startServiceProcess('node', { DATABASE_URL: db.url }, { after })
    const lost = await lostAcknowledgements(db.sql, drive.acknowledged)
    assert.deepEqual(
      lost,
      [],
      `${lost.length} of ${drive.acknowledged.length} acknowledged creates were lost`,
    )
    // A client that retries after the crash gets its plant back.
    const sample = drive.acknowledged.at(-1)
    const retry = await fetch(`${second.base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: `{"id":${sample?.id},"name":${JSON.stringify(sample?.name)}${sample?.tag ? `,"tag":"${sample.tag}"` : ''}}`,
    })
    assert.equal(retry.status, 200)
  })

  test('with the embedded database: its PostgreSQL stops within seconds of the SIGKILL, and nothing acknowledged is lost', async () => {
    const { dir, ...tmp } = await projectCopy()
    const first = await startServiceProcess('node', {}, tmp, { cwd: dir })
    const token = (await readFile(join(dir, '.data', 'dev-token'), 'utf8')).trim()
    const drive = driveCreates(first.base, token, { concurrency: 32, untilError: true })
    await underWay(drive)
    const postmaster = Number(
      (await readFile(join(dir, '.data', 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0],
    )
    first.child.kill('SIGKILL')
    await first.exited
    await drive.stop()
    assert.ok(drive.acknowledged.length > 100)
    // Its watch stops the embedded PostgreSQL (fast shutdown) once the service is gone.
    await within(10_000, async () => !isRunning(postmaster))

    const second = await startServiceProcess('node', {}, tmp, { cwd: dir })
    const port = (await readFile(join(dir, '.data', 'postgres', 'postmaster.pid'), 'utf8')).split(
      '\n',
    )[3]
    const { password } = JSON.parse(
      await readFile(join(dir, '.data', 'embedded.json'), 'utf8'),
    ) as { password: string }
    const sql = postgres(
      `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
      { max: 1, onnotice: () => {} },
    )
    const lost = await lostAcknowledgements(sql, drive.acknowledged)
    await sql.end()
    assert.deepEqual(
      lost,
      [],
      `${lost.length} of ${drive.acknowledged.length} acknowledged creates were lost`,
    )
    second.child.kill('SIGTERM')
    assert.equal(await second.exited, 0)
  })
})
