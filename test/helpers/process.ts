import { type ChildProcess, spawn } from 'node:child_process'
import { projectDir } from './cli.ts'

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

/** Starts `src/main.ts` on a free port under Node or Deno and waits until it listens. */
export async function startServiceProcess(
  runtime: keyof typeof commands,
  env: Record<string, string>,
  cleanup: { after: (fn: () => unknown) => void },
  cwd = projectDir,
): Promise<ServiceProcess> {
  const [command, ...args] = commands[runtime]
  const child = spawn(command, args, {
    cwd,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', ...env },
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
        const parsed = JSON.parse(line) as Record<string, unknown>
        lines.push(parsed)
        const message = String(parsed.message)
        if (message.startsWith('listening on ')) resolve(message.slice('listening on '.length))
      }
    })
    void exited.then((code) =>
      reject(new Error(`exited with ${code} before listening: ${JSON.stringify(lines)}`)),
    )
  })
  return { base, child, lines, exited }
}

/** Inserts a token straight into `api_tokens` and waits until the service accepts it. */
export async function tokenFor(
  sql: import('postgres').Sql,
  base: string,
  name: string,
): Promise<string> {
  const token = `pst_${name}${'x'.repeat(40)}`
  await sql`insert into api_tokens (name, token_sha256) values (${name}, sha256(convert_to(${token}, 'UTF8')))`
  for (let i = 0; i < 100; i++) {
    const res = await fetch(`${base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    })
    if (res.status !== 401) return token
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error('the token was not accepted within 2 s')
}
