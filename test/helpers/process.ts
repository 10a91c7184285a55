import { type ChildProcess, spawn } from 'node:child_process'
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import type { Sql } from 'postgres'
import { createToken } from '../../src/auth/token-repository.ts'
import { isFailure } from '../../src/outcome.ts'
import { projectDir } from './cli.ts'
import { within } from './wait.ts'

/** The service running as its own process, as `npm start` or `deno task start` runs it. */
export type ServiceProcess = {
  readonly base: string
  readonly child: ChildProcess
  /** Every log line so far, parsed. */
  readonly lines: Record<string, unknown>[]
  /** Resolves with the exit code. */
  readonly exited: Promise<number | null>
}

const commands = {
  node: [process.execPath, '--import', 'tsx', 'src/main.ts'],
  deno: ['./node_modules/.bin/deno', 'task', '--quiet', 'start'],
} as const

/**
 * The warm-up of a service process in a test, unless `env` sets its own: a short one (the full
 * 3,000 creates cost each start about 1.6 s of CPU, taken from every test running beside it);
 * test/warm-up.test.ts and test/doc-examples.test.ts run the default.
 */
const testWarmUpCreates = '100'

/**
 * The environment of a service process in a test: the path and home, port 0, the tests' short
 * warm-up, then `env`.
 */
export function serviceEnv(env: Record<string, string>): Record<string, string | undefined> {
  return {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: '0',
    WARM_UP_CREATES: testWarmUpCreates,
    ...env,
  }
}

/** Starts `src/main.ts` on a free port under Node or Deno and waits until it listens. */
export async function startServiceProcess(
  runtime: keyof typeof commands,
  env: Record<string, string>,
  cleanup: { after: (fn: () => unknown) => void },
  {
    cwd = projectDir,
    nodeFlags = [],
    otherLine,
  }: {
    /** The checkout to run (another one's, to compare with). */
    cwd?: string
    /** Flags for Node itself, before the script (`--trace-gc-nvp`, say). */
    nodeFlags?: readonly string[]
    /**
     * Hears each line of standard output that is not a log line (V8's trace, say); without it
     * such a line fails the start, as the log must be JSON alone.
     */
    otherLine?: (line: string) => void
  } = {},
): Promise<ServiceProcess> {
  const [command, ...script] = commands[runtime]
  const child = spawn(command, [...nodeFlags, ...script], {
    cwd,
    env: serviceEnv(env),
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  cleanup.after(() => child.kill('SIGKILL'))
  const lines: Record<string, unknown>[] = []
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  let buffered = ''
  const base = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (c: Buffer) => {
      buffered += c.toString()
      const complete = buffered.split('\n')
      buffered = complete.pop() ?? ''
      for (const line of complete) {
        if (otherLine !== undefined && !line.startsWith('{')) {
          otherLine(line)
          continue
        }
        const parsed = JSON.parse(line) as Record<string, unknown>
        lines.push(parsed)
        const message = String(parsed.message)
        if (message === 'listening') resolve(String(parsed.url))
        // An older checkout (test/token-upgrade.test.ts) wrote its address into the message.
        else if (message.startsWith('listening on ')) resolve(message.slice('listening on '.length))
      }
    })
    void exited.then((code) =>
      reject(new Error(`exited with ${code} before listening: ${JSON.stringify(lines)}`)),
    )
  })
  return { base, child, lines, exited }
}

/** Creates a token as `npm run token -- create` does and waits until the service accepts it. */
export async function tokenFor(
  sql: Sql,
  base: string,
  name: string,
  expiresAt?: Date,
): Promise<string> {
  const created = await createToken(sql, name, expiresAt)
  if (isFailure(created)) throw new Error(created.message)
  const token = created
  await within(2000, async () => {
    const res = await fetch(`${base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    })
    await res.arrayBuffer()
    return res.status !== 401
  })
  return token
}

/** The files process `pid` holds open (Linux: /proc/PID/fd), by number, each with its target. */
export function openFiles(pid: number): { fd: number; target: string }[] {
  return readdirSync(`/proc/${pid}/fd`)
    .map(Number)
    .sort((a, b) => a - b)
    .map((fd) => {
      try {
        return { fd, target: readlinkSync(`/proc/${pid}/fd/${fd}`) }
      } catch {
        return { fd, target: 'closed' } // closed meanwhile
      }
    })
}

/** The inode of an open file's target (`openFiles`) when it is a socket. */
export function socketInode(target: string): string | undefined {
  return /^socket:\[(\d+)\]$/.exec(target)?.[1]
}

/**
 * The TCP sockets a process holds to `port` on this machine, by inode (Linux: its file
 * descriptors' sockets, looked up in /proc/net/tcp and tcp6): those established, or with
 * `anyState` every one it has not closed yet (one whose peer has ended it, say).
 */
export function socketsTo(pid: number, port: number, { anyState = false } = {}): Set<string> {
  const inodes = new Set<string>()
  for (const { target } of openFiles(pid)) {
    const inode = socketInode(target)
    if (inode !== undefined) inodes.add(inode)
  }
  const found = new Set<string>()
  for (const table of ['tcp', 'tcp6']) {
    for (const line of readFileSync(`/proc/${pid}/net/${table}`, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      // local_address rem_address st … inode (the tenth field)
      const remotePort = Number.parseInt(f[2]?.split(':')[1] ?? '', 16)
      const inode = f[9] ?? ''
      if ((anyState || f[3] === '01') && remotePort === port && inodes.has(inode)) found.add(inode)
    }
  }
  return found
}

/** The TCP connections a process holds, established, to `port` on this machine. */
export function connectionsTo(pid: number, port: number): number {
  return socketsTo(pid, port).size
}

/** Whether process `pid` runs (signal 0 reaches it). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
