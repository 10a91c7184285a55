import process from 'node:process'
import { setFlagsFromString } from 'node:v8'

/**
 * Has V8 collect the young generation on the main thread alone (`--no-parallel-scavenge`), unless
 * the process was started with `--parallel-scavenge`; whether it did.
 *
 * V8 scavenges with helper threads beside the main one, which waits for them. What a request
 * leaves in the young generation is mostly dead by the next scavenge, and on the few cores a
 * service shares with its database and its clients the helpers wait to be scheduled: alone, the
 * main thread paused about a third less per scavenge, and about half as long in all
 * (BENCHMARKS.md, "Scavenges on the main thread alone"). Deno's `node:v8` sets no flags: there
 * `--v8-flags=--no-parallel-scavenge` does it.
 */
export function scavengeOnMainThread(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.includes('--parallel-scavenge')) return false
  setFlagsFromString('--no-parallel-scavenge')
  return true
}
