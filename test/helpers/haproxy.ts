import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { freePort } from '../../src/db/embedded.ts'
import type { Cleanup } from './database.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

/** Debian's haproxy package (HAPROXY_PATH to use another). */
export const haproxyPath = process.env.HAPROXY_PATH || '/usr/sbin/haproxy'
export const haproxyPresent = existsSync(haproxyPath)

/**
 * HAProxy in HTTP mode in front of the service instances on `ports` of 127.0.0.1, as an operator
 * runs it: keep-alive on both sides, each instance checked with `GET /readyz` every 500 ms,
 * marked down at the first failure and up after two successes, `option redispatch`, and no
 * `retry-on` (HAProxy resends a request only when it could not connect). Stopped after `t`.
 */
export async function startHaproxy(t: Cleanup, ports: readonly number[]) {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-haproxy-')
  const port = await freePort()
  const config = join(dir, 'haproxy.cfg')
  await writeFile(
    config,
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
      '',
    ].join('\n'),
  )
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
  const url = `http://127.0.0.1:${port}`
  await within(10_000, async () => {
    try {
      return (await fetch(`${url}/healthz`)).status === 200
    } catch {
      return false
    }
  }).catch(() => {
    throw new Error(`HAProxy did not serve: ${output}`)
  })
  return { url, output: () => output }
}
