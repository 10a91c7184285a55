import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { freePort } from '../../src/db/start/embedded.ts'
import { migrationNames } from '../../src/db/start/migrate.ts'
import { limits } from '../../src/limits.ts'
import { projectDir, type Ran, runMain, runNpm } from '../helpers/cli.ts'
import { type Cleanup, createTestDatabase } from '../helpers/database.ts'
import { serviceEnv, startServiceProcess } from '../helpers/process.ts'
import { tempDir } from '../helpers/temp-dir.ts'

function startLine(stdout: string): string {
  const lines = stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { level: string; message: string; error?: string })
  const failed = lines.find((l) => l.level === 'error')
  assert.ok(failed, stdout)
  assert.equal(failed.message, 'the service did not start')
  return String(failed.error)
}

/**
 * A black-holed database: a port that accepts connections and never answers. `reached`
 * resolves when the first connection arrives.
 */
async function blackHole(t: Cleanup): Promise<{ port: number; reached: Promise<void> }> {
  const sockets = new Set<Socket>()
  let arrived: () => void = () => {}
  const reached = new Promise<void>((resolve) => {
    arrived = resolve
  })
  const server = createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
    arrived()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => {
    for (const socket of sockets) socket.destroy()
    server.close()
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return { port: address.port, reached }
}

async function timed(run: () => Promise<Ran>): Promise<Ran & { ms: number }> {
  const started = performance.now()
  const ran = await run()
  return { ...ran, ms: performance.now() - started }
}

/** Spawns `args` under Node in the project folder; resolves its lines as they come, and its end. */
function spawnService(args: readonly string[], env: Record<string, string>, t: Cleanup) {
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], {
    cwd: projectDir,
    env: serviceEnv(env),
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  t.after(() => child.kill('SIGKILL'))
  const messages: string[] = []
  const records: Record<string, unknown>[] = []
  const waiting: { text: string; resolve: () => void }[] = []
  let buffered = ''
  child.stdout.on('data', (c: Buffer) => {
    buffered += c.toString()
    const lines = buffered.split('\n')
    buffered = lines.pop() ?? ''
    for (const line of lines) {
      const record = JSON.parse(line) as Record<string, unknown>
      const message = String(record.message)
      records.push(record)
      messages.push(message)
      for (const w of waiting) if (message.startsWith(w.text)) w.resolve()
    }
  })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const logged = (text: string) =>
    new Promise<void>((resolve) => {
      if (messages.some((m) => m.startsWith(text))) resolve()
      else waiting.push({ text, resolve })
    })
  return { child, messages, records, exited, logged }
}

describe('start-up faults', () => {
  test('a black-holed database (accepts, never answers) stops npm start, npm run migrate and npm run token within the connect limit, with one line naming it and exit status 1', async () => {
    const { port } = await blackHole({ after })
    const url = `postgres://plants:s3cret@127.0.0.1:${port}/plants`
    const [start, migrate, token] = await Promise.all([
      timed(() => runMain([], { DATABASE_URL: url, PORT: '0' })),
      timed(() => runNpm('migrate', [], { DATABASE_URL: url })),
      timed(() => runNpm('token', ['list'], { DATABASE_URL: url })),
    ])
    const named = new RegExp(
      `cannot use the database at 127\\.0\\.0\\.1:${port}/plants as plants: no answer within ${limits.database.connect / 1000} s`,
    )
    assert.equal(start.code, 1)
    assert.match(startLine(start.stdout), named)
    for (const command of [migrate, token]) {
      assert.equal(command.code, 1, command.stderr)
      const lines = command.stderr.split('\n').filter((l) => l.startsWith('plant-store:'))
      assert.equal(lines.length, 1, command.stderr)
      assert.match(lines[0] ?? '', named)
    }
    for (const { ms, stdout, stderr } of [start, migrate, token]) {
      assert.ok(ms >= limits.database.connect, `it gave up after ${ms} ms`)
      // The connect limit, plus starting Node and tsx on a busy machine.
      assert.ok(ms < limits.database.connect + 10_000, `it took ${ms} ms`)
      assert.ok(!`${stdout}${stderr}`.includes('s3cret'), 'the password is never shown')
    }
  })

  test('SIGTERM while the start waits for a black-holed database stops the process with exit status 0', async () => {
    const { port, reached } = await blackHole({ after })
    const service = spawnService(
      ['src/main.ts'],
      { DATABASE_URL: `postgres://plants:s3cret@127.0.0.1:${port}/plants` },
      { after },
    )
    await reached
    const signalled = performance.now()
    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
    const ms = performance.now() - signalled
    assert.ok(ms < limits.database.connect + 5_000, `it stopped ${ms} ms after the signal`)
    assert.ok(
      service.records.some(
        (r) => r.message === 'a signal came during start-up; stopping' && r.signal === 'SIGTERM',
      ),
    )
    assert.equal(service.messages.at(-1), 'stopped')
  })

  test('SIGINT while the embedded database is being initialised stops the process with exit status 0 and the embedded server stopped', async () => {
    const { dir } = await tempDir({ after }, 'plant-store-start-signal-')
    const service = spawnService(['test/helpers/serve-child.ts', dir], {}, { after })
    await service.logged('initialising the embedded database')
    service.child.kill('SIGINT')
    assert.equal(await service.exited, 0)
    assert.ok(
      service.records.some(
        (r) => r.message === 'a signal came during start-up; stopping' && r.signal === 'SIGINT',
      ),
    )
    assert.ok(service.messages.includes('embedded database stopped'), service.messages.join('; '))
    assert.ok(!service.messages.includes('listening'))
    assert.ok(
      !existsSync(join(dir, 'postgres', 'postmaster.pid')),
      'no embedded server is left running',
    )
  })

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

  test('with DATABASE_DIRECT_URL set, an unreachable DATABASE_URL stops the start with exit status 1 and a message that names DATABASE_URL, not DATABASE_DIRECT_URL', async () => {
    const db = await createTestDatabase({ after })
    const port = await freePort()
    const { code, stdout } = await runMain([], {
      DATABASE_URL: `postgres://plants:s3cret@127.0.0.1:${port}/plants`,
      DATABASE_DIRECT_URL: db.url,
      PORT: '0',
    })
    assert.equal(code, 1)
    assert.match(
      startLine(stdout),
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
    assert.equal(count, migrationNames().length)
  })
})
