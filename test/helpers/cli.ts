import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { tokenCommand } from '../../src/cli/token.ts'
import { parseConfig } from '../../src/config.ts'
import { commandLog, describeError } from '../../src/log.ts'

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
 * Runs `token ARGS` in this process, as `src/main.ts` runs it (the configuration from `env`
 * alone, the log at warn on standard error, an error thrown ending it with one line and status
 * 1), its standard output and error captured. A `runMain` of a token command costs a Node start
 * (about 0.45 s of CPU on Node 20, most of it tsx's): the tests of the command's verbs run it
 * here; the tests of `npm run token` as a process (test/operator-commands.test.ts,
 * test/doc-examples.test.ts, the first of test/token-command.test.ts) run it through `runMain`
 * or npm.
 */
export async function runTokenHere(
  args: readonly string[],
  env: Record<string, string | undefined>,
): Promise<Ran> {
  let stdout = ''
  let stderr = ''
  const config = parseConfig(env)
  const log = commandLog(config.logLevel, (line) => {
    stderr += line
  })
  try {
    const code = await tokenCommand(config, log, args, {
      out: (line) => {
        stdout += `${line}\n`
      },
      err: (line) => {
        stderr += `${line}\n`
      },
    })
    return { code, stdout, stderr }
  } catch (err) {
    return { code: 1, stdout, stderr: `${stderr}plant-store: ${describeError(err)}\n` }
  }
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
