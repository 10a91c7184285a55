// Runs the test suite against a real PostgreSQL, chosen in this order: TEST_DATABASE_URL if set;
// a Testcontainers PostgreSQL when a container runtime answers; otherwise an embedded PostgreSQL
// in a temporary folder. Usage: tsx test/run.ts [test files or folders...]
import { spawn } from 'node:child_process'
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startEmbedded } from '../src/db/embedded.ts'
import { createLog } from '../src/log.ts'

const log = createLog('info', (line) => process.stderr.write(line))
const root = fileURLToPath(new URL('..', import.meta.url))

async function testFiles(dir: string): Promise<string[]> {
  const found: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) found.push(...(await testFiles(path)))
    else if (entry.name.endsWith('.test.ts')) found.push(relative(root, path))
  }
  return found.sort()
}

type Database = { url: string; stop: () => Promise<void>; kind: string }

async function fromContainer(): Promise<Database | undefined> {
  try {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql')
    const container = await new PostgreSqlContainer('postgres:18-alpine').start()
    return {
      url: container.getConnectionUri(),
      stop: async () => void (await container.stop()),
      kind: 'testcontainers',
    }
  } catch (err) {
    log.info('no container runtime; using embedded PostgreSQL', {
      reason: (err instanceof Error ? err.message : String(err)).split('\n')[0],
    })
    return undefined
  }
}

async function fromEmbedded(): Promise<Database> {
  const dir = await mkdtemp(join(tmpdir(), 'plant-store-test-'))
  // mkdtemp makes the folder 0700; the server runs as user postgres when started as root.
  await chmod(dir, 0o755)
  const db = await startEmbedded({
    dir,
    log: createLog('warn', (l) => process.stderr.write(l)),
    shareRunning: false,
    fast: true,
  })
  return {
    url: db.url,
    kind: 'embedded',
    stop: async () => {
      await db.stop()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

async function acquire(): Promise<Database> {
  const given = process.env.TEST_DATABASE_URL
  if (given) return { url: given, stop: async () => {}, kind: 'TEST_DATABASE_URL' }
  return (await fromContainer()) ?? (await fromEmbedded())
}

// Arguments are test files or folders of them; none means every test under test/.
const targets = process.argv.length > 2 ? process.argv.slice(2) : ['test']
const files: string[] = []
for (const target of targets) {
  if (target.endsWith('.test.ts')) files.push(target)
  else files.push(...(await testFiles(join(root, target))))
}
if (files.length === 0) {
  log.error('no test files found')
  process.exit(1)
}
const db = await acquire()
log.info('test database ready', { kind: db.kind, files: files.length })
const child = spawn(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-timeout=120000', '--test-concurrency=2', ...files],
  { stdio: 'inherit', cwd: root, env: { ...process.env, TEST_DATABASE_URL: db.url } },
)
const stopChild = (signal: NodeJS.Signals) => child.kill(signal)
process.on('SIGINT', stopChild)
process.on('SIGTERM', stopChild)
const code = await new Promise<number>((resolve) =>
  child.on('exit', (c, s) => resolve(c ?? (s ? 1 : 0))),
)
await db.stop()
process.exit(code)
