import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

/** The project folder. */
export const projectDir = fileURLToPath(new URL('../..', import.meta.url))

/** What a command printed, and how it ended. */
export type Ran = { code: number | null; stdout: string; stderr: string }

/**
 * Runs a command in `cwd` (the project folder) with only `env`, the path and home; captures its
 * output.
 */
function capture(
  command: string,
  args: readonly string[],
  env: Record<string, string | undefined>,
  cwd = projectDir,
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString()
    })
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString()
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/**
 * Runs `src/main.ts` with arguments and environment, as `npm run …` (or `deno task`) would, in
 * `cwd` (the project folder; another checkout of it, e.g. an older version).
 */
export function runMain(
  args: readonly string[],
  env: Record<string, string | undefined>,
  runtime: 'node' | 'deno' = 'node',
  cwd = projectDir,
): Promise<Ran> {
  const [command, ...prefix] =
    runtime === 'node'
      ? [process.execPath, '--import', 'tsx', 'src/main.ts']
      : ['./node_modules/.bin/deno', 'task', '--quiet', 'start']
  return capture(command as string, [...prefix, ...args], env, cwd)
}

/**
 * Runs an npm script as an operator does (`npm run -s SCRIPT -- ARGS`), with only `env` and the
 * path: `-s` keeps npm's own lines out of the script's output.
 */
export function runNpm(
  script: string,
  args: readonly string[],
  env: Record<string, string | undefined>,
): Promise<Ran> {
  return capture('npm', ['run', '-s', script, '--', ...args], env)
}
