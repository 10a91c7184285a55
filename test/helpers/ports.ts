import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from '../../src/db/start/embedded.ts'

// A port chosen by `freePort()` (port 0) comes from the kernel's ephemeral range, the same range
// every outgoing connection's local port comes from. That is fine for a server that listens until
// its test ends, but not for one a test stops and starts again on the same port (a Patroni member
// demoted and restarted, a replica promoted, a service replaced in a rolling deploy): while it is
// down, another test file's `freePort()` or any outgoing connection may take the port, and the
// server never comes back ("could not bind IPv4 address: Address already in use", as a CI run
// saw a Patroni member do). So such servers take their ports from below that range, where neither
// can reach, and the suite's concurrent files keep apart through one lock file per port.

const locks = join(tmpdir(), 'plant-store-ports')
const held = new Set<string>()
let cleanupInstalled = false

/** The kernel's ephemeral range's first port, or undefined off Linux. */
function ephemeralStart(): number | undefined {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)
    const port = Number(low)
    return Number.isInteger(port) ? port : undefined
  } catch {
    return undefined
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Takes the lock file for `port`, or false when a live process holds it. */
function lock(port: number): boolean {
  const path = join(locks, String(port))
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx')
      writeSync(fd, String(process.pid))
      closeSync(fd)
      held.add(path)
      if (!cleanupInstalled) {
        cleanupInstalled = true
        process.on('exit', () => {
          for (const p of held) {
            try {
              unlinkSync(p)
            } catch {}
          }
        })
      }
      return true
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      const owner = Number(readFileSync(path, 'utf8'))
      if (Number.isInteger(owner) && owner > 0 && alive(owner)) return false
      try {
        unlinkSync(path)
      } catch {}
    }
  }
  return false
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolveBindable) => {
    const server = createServer()
    server.once('error', () => resolveBindable(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolveBindable(true)))
  })
}

/**
 * A port on 127.0.0.1 for a server that may be stopped and started again on it: below the
 * ephemeral range, free now, and held by this process (a lock file) until it exits. Off Linux,
 * a `freePort()`.
 */
export async function serverPort(): Promise<number> {
  const end = ephemeralStart()
  const start = 20000
  if (end === undefined || end - start < 1000) return freePort()
  mkdirSync(locks, { recursive: true })
  const span = end - start
  const first = Math.floor(Math.random() * span)
  for (let i = 0; i < span; i++) {
    const port = start + ((first + i) % span)
    if (!lock(port)) continue
    if (await bindable(port)) return port
  }
  throw new Error(`no free port between ${start} and ${end}`)
}
