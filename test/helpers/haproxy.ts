import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Cleanup } from './database.ts'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

/** Debian's haproxy package (HAPROXY_PATH to use another). */
export const haproxyPath = process.env.HAPROXY_PATH || '/usr/sbin/haproxy'
export const haproxyPresent = existsSync(haproxyPath)
/**
 * The `skip` of a test that needs HAProxy: outside CI, the reason it is missing; in CI never
 * (.ci/run installs it, and its absence fails the test).
 */
export const haproxySkip =
  !haproxyPresent && !process.env.CI ? `no HAProxy at ${haproxyPath}` : false

/** Runs HAProxy on `lines` of configuration until `t` ends; resolves once it has started. */
async function runHaproxy(t: Cleanup, lines: readonly string[], ready: () => Promise<boolean>) {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-haproxy-')
  const config = join(dir, 'haproxy.cfg')
  await writeFile(config, [...lines, ''].join('\n'))
  const child: ChildProcess = spawn(haproxyPath, ['-db', '-f', config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let output = ''
  child.stderr?.on('data', (c: Buffer) => {
    output = (output + c.toString()).slice(-4000)
  })
  const exited = new Promise((r) => child.on('exit', r))
  tmp.after(async () => {
    child.kill('SIGTERM')
    await exited
  })
  await within(10_000, ready).catch(() => {
    throw new Error(`HAProxy did not serve: ${output}`)
  })
}

/**
 * HAProxy in TCP mode in front of a Patroni cluster, as Patroni's documentation sets it up: each
 * member's PostgreSQL port checked with `GET /primary` on its REST port every 500 ms, and the
 * sessions on a member marked down shut at once (`on-marked-down shutdown-sessions`). Resolves
 * with the port that leads to the leader.
 */
export async function startHaproxyForPatroni(
  t: Cleanup,
  members: readonly { name: string; port: number; rest: number }[],
): Promise<number> {
  const port = await serverPort()
  await runHaproxy(
    t,
    [
      'global',
      '  maxconn 1000',
      'defaults',
      '  mode tcp',
      '  timeout connect 1s',
      '  timeout client 30m',
      '  timeout server 30m',
      '  timeout check 1s',
      'listen primary',
      `  bind 127.0.0.1:${port}`,
      '  option httpchk GET /primary',
      '  http-check expect status 200',
      '  default-server inter 500ms fall 1 rise 1 on-marked-down shutdown-sessions',
      ...members.map((m) => `  server ${m.name} 127.0.0.1:${m.port} check port ${m.rest}`),
    ],
    async () => {
      const { connect } = await import('node:net')
      return new Promise<boolean>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.destroy()
          resolve(true)
        })
        socket.once('error', () => resolve(false))
      })
    },
  )
  return port
}

/**
 * HAProxy in HTTP mode in front of the service instances on `ports` of 127.0.0.1, as an operator
 * runs it: keep-alive on both sides, each instance checked with `GET /readyz` every 500 ms,
 * marked down at the first failure and up after two successes, `option redispatch`, and no
 * `retry-on` (HAProxy resends a request only when it could not connect). Stopped after `t`.
 */
export async function startHaproxy(t: Cleanup, ports: readonly number[]) {
  const port = await serverPort()
  const url = `http://127.0.0.1:${port}`
  await runHaproxy(
    t,
    [
      'global',
      '  maxconn 1000',
      'defaults',
      '  mode http',
      '  option http-keep-alive',
      '  option redispatch',
      '  timeout connect 1s',
      '  timeout client 30s',
      '  timeout server 30s',
      '  timeout http-keep-alive 5s',
      'frontend plants',
      `  bind 127.0.0.1:${port}`,
      '  default_backend instances',
      'backend instances',
      '  balance roundrobin',
      '  option httpchk GET /readyz',
      '  http-check expect status 200',
      '  default-server inter 500ms fall 1 rise 2',
      ...ports.map((p, i) => `  server i${i} 127.0.0.1:${p} check`),
    ],
    async () => {
      try {
        return (await fetch(`${url}/healthz`)).status === 200
      } catch {
        return false
      }
    },
  )
  return { url }
}
