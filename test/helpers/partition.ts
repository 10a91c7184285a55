import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import type { Cleanup } from './database.ts'

/** Debian's iptables (IPTABLES_PATH to use another). */
export const iptablesPath = process.env.IPTABLES_PATH || '/usr/sbin/iptables'

/**
 * A partition test's `skip`: outside CI, why this machine cannot cut a port off; false in CI
 * (and where it can), where the test then fails on `partitionUnavailable()`'s reason.
 */
export function partitionSkip(): string | false {
  const missing = partitionUnavailable()
  return missing !== undefined && process.env.CI === undefined ? missing : false
}

/** Why this machine cannot cut a port off, or `undefined` when it can. */
export function partitionUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'iptables rules need root (CI runs as root)'
  if (!existsSync(iptablesPath)) return `no iptables at ${iptablesPath} (apt-get install iptables)`
  return undefined
}

/**
 * Which packets of a TCP port on the loopback interface are dropped: `both` ways, or only
 * `from-port` (the server's answers and acknowledgements; the client's packets still arrive).
 */
export type Direction = 'both' | 'from-port'

/** A silent partition of one port: packets dropped by the kernel, no connection reset. */
export type Partition = { readonly heal: () => void }

/**
 * Drops the packets of `port` on `lo` (iptables rules naming only that port, and `address` when
 * given: the server's other packets go on) until `heal()`, which runs anyway after `t` and when
 * the process exits, whatever the way.
 */
export function partition(
  port: number,
  direction: Direction,
  t: Cleanup,
  address?: string,
): Partition {
  const comment = `plant-store-test-${process.pid}-${port}`
  const matches = direction === 'both' ? ['--sport', '--dport'] : ['--sport']
  const rule = (match: string) => [
    'INPUT',
    '-i',
    'lo',
    ...(address === undefined ? [] : [match === '--sport' ? '-s' : '-d', address]),
    '-p',
    'tcp',
    match,
    String(port),
    '-m',
    'comment',
    '--comment',
    comment,
    '-j',
    'DROP',
  ]
  const present = (match: string) => {
    try {
      execFileSync(iptablesPath, ['-w', '-C', ...rule(match)], { stdio: 'ignore' })
      return true
    } catch {
      return false
    }
  }
  let active = true
  // Killed by a signal, a process runs no 'exit' listener: heal first, then die of the signal.
  const onSignal = (signal: NodeJS.Signals) => {
    heal()
    process.kill(process.pid, signal)
  }
  const heal = () => {
    if (!active) return
    active = false
    process.off('exit', heal)
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
    for (const match of matches) {
      for (let attempt = 1; present(match); attempt++) {
        try {
          execFileSync(iptablesPath, ['-w', '-D', ...rule(match)], { stdio: 'pipe' })
        } catch (err) {
          if (attempt >= 3) throw err
        }
      }
    }
  }
  process.on('exit', heal)
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  t.after(heal)
  try {
    for (const match of matches) execFileSync(iptablesPath, ['-w', '-I', ...rule(match)])
  } catch (err) {
    heal()
    throw err
  }
  return { heal }
}
