import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { join } from 'node:path'
import type { Cleanup } from './database.ts'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

/** Debian's pgbouncer package (PGBOUNCER_PATH to use another). */
export const pgbouncerPath = process.env.PGBOUNCER_PATH || '/usr/sbin/pgbouncer'
export const pgbouncerPresent = existsSync(pgbouncerPath)

/** Starts PgBouncer in transaction mode in front of the server of `directUrl`. */
export async function startPgBouncer(directUrl: string, t: Cleanup, { poolSize = 2 } = {}) {
  const direct = new URL(directUrl)
  const { dir, ...tmp } = await tempDir(t, 'plant-store-pgbouncer-')
  const port = await serverPort()
  const user = decodeURIComponent(direct.username)
  await writeFile(join(dir, 'userlist.txt'), `"${user}" ""\n`)
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      // Every database name goes to the same one on the server, as the test's user.
      `* = host=${direct.hostname} port=${direct.port} user=${user} password=${decodeURIComponent(direct.password)}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 100',
      `admin_users = ${user}`,
      '',
    ].join('\n'),
  )
  // PgBouncer refuses to run as root; -u drops to the postgres user. It logs to standard error.
  const asRoot = process.getuid?.() === 0 ? ['-u', 'postgres'] : []
  const start = async () => {
    const child: ChildProcess = spawn(pgbouncerPath, [...asRoot, join(dir, 'pgbouncer.ini')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    let output = ''
    child.stderr?.on('data', (c: Buffer) => {
      output += c.toString()
    })
    const exited = new Promise((r) => child.on('exit', r))
    const stop = async (signal: NodeJS.Signals) => {
      child.kill(signal)
      await exited
    }
    tmp.after(() => stop('SIGINT'))
    await within(10_000, () => canConnect(port)).catch(() => {
      throw new Error(`PgBouncer did not listen: ${output.slice(-1000)}`)
    })
    return stop
  }
  let stop = await start()
  const pooled = new URL(directUrl)
  pooled.hostname = '127.0.0.1'
  pooled.port = String(port)
  return {
    url: pooled.toString(),
    port,
    user,
    /**
     * PgBouncer restarted as its service unit does: an immediate shutdown (SIGTERM: every
     * client and server connection closed), then a start on the same port; resolves with how
     * long it took no connections, in ms.
     */
    async restart(): Promise<number> {
      const stopping = performance.now()
      await stop('SIGTERM')
      stop = await start()
      return performance.now() - stopping
    },
  }
}

/** Whether something accepts TCP connections on the port of 127.0.0.1. */
function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}
