import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, statSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import postgres from 'postgres'
import { parseConfig } from '../src/config.ts'
import { startEmbedded } from '../src/db/embedded.ts'
import { createLog } from '../src/log.ts'
import { startService } from '../src/service.ts'
import { projectDir } from './helpers/cli.ts'
import { tempDir } from './helpers/temp-dir.ts'

function capture() {
  const lines: Record<string, unknown>[] = []
  return {
    lines,
    log: createLog('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)),
  }
}

describe('the embedded database (no DATABASE_URL)', () => {
  test('the first start creates the dev token (file mode 0600, printed once); data and token survive a restart', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    const config = parseConfig({ PORT: '0' })
    const first = capture()
    const service = await startService(config, first.log, { dataDir: dir })
    tmp.after(() => service.close())
    const token = (await readFile(join(dir, 'dev-token'), 'utf8')).trim()
    assert.match(token, /^pst_/)
    assert.equal(statSync(join(dir, 'dev-token')).mode & 0o777, 0o600)
    assert.ok(
      first.lines.some((l) => l.devToken === token),
      'the start-up log prints the dev token',
    )
    const created = await fetch(`${service.url}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"id":9007199254740993,"name":"kept"}',
    })
    assert.equal(created.status, 200)
    await service.close()
    assert.ok(
      !existsSync(join(dir, 'postgres', 'postmaster.pid')),
      'the embedded server was stopped',
    )

    const second = capture()
    const again = await startService(config, second.log, { dataDir: dir })
    tmp.after(() => again.close())
    assert.ok(!second.lines.some((l) => 'devToken' in l), 'no second dev token')
    const retry = await fetch(`${again.url}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"id":9007199254740993,"name":"kept"}',
    })
    assert.equal(retry.status, 200, 'the plant and the token were kept across the restart')
  })

  test('a server orphaned by a SIGKILLed process is stopped on the next start, with its data kept', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/embedded-child.ts', dir],
      {
        cwd: projectDir,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    )
    const url = await new Promise<string>((resolve) =>
      child.stdout.once('data', (c: Buffer) => resolve(c.toString().trim())),
    )
    const sql = postgres(url, { max: 1, onnotice: () => {} })
    await sql`create table kept (v text)`
    await sql`insert into kept values ('before the kill')`
    await sql.end()
    const orphan = Number(
      (await readFile(join(dir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0],
    )
    child.kill('SIGKILL')
    await new Promise((r) => child.on('exit', r))
    process.kill(orphan, 0) // still running: orphaned

    const { lines, log } = capture()
    const db = await startEmbedded({ dir, log, shareRunning: false, fast: true })
    tmp.after(() => db.stop())
    assert.ok(
      lines.some(
        (l) => String(l.message).includes('left running by a killed process') && l.pid === orphan,
      ),
    )
    const again = postgres(db.url, { max: 1, onnotice: () => {} })
    const rows = await again`select v from kept`
    await again.end()
    assert.deepEqual(
      rows.map((r) => r.v),
      ['before the kill'],
    )
  })

  test('a second service on a cluster in use by a live process is refused with a clear message', async () => {
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-embedded-')
    const db = await startEmbedded({ dir, log: capture().log, shareRunning: false, fast: true })
    tmp.after(() => db.stop())
    // The owner file names this live process; another process starting the cluster is refused.
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/embedded-child.ts', dir],
      {
        cwd: projectDir,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    )
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString()
    })
    const code = await new Promise((r) => child.on('exit', r))
    assert.notEqual(code, 0)
    assert.match(stderr, /in use by process \d+/)
  })
})
