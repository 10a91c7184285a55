import { type Bench, f, say } from '../bench.ts'
import { batchRows, cpuSeconds, rssMb, spawnService } from '../processes.ts'

/**
 * A new service under load until it has sent `soakStatements` insert statements, a minute at a
 * time; then the soaked service against a new one, interleaved, since the machine's own drift
 * over the soak is not the service's.
 */
export async function soakPhase(bench: Bench) {
  const { options, url, sql } = bench
  const connections = options.soakConnections
  const soaked = await spawnService('soak', url)
  const pid = soaked.child.pid ?? 0
  say('')
  say(
    `soak: ${connections} connections until the service has sent ${options.soakStatements.toLocaleString('en')} insert statements, a minute at a time`,
  )
  say('minute  statements so far    req/s  statements/s  CPU µs/req  RSS MB')
  const minutes: {
    statements: number
    rps: number
    statementsPerSecond: number
    cpuUs: number
    rssMb: number
  }[] = []
  for (let minute = 1; ; minute++) {
    await sql`truncate plants`
    const before = await batchRows(soaked.base)
    const cpuBefore = cpuSeconds(pid)
    const r = await bench.load(soaked, connections, 60)
    const after = await batchRows(soaked.base)
    const m = {
      statements: after.statements,
      rps: r.rps,
      statementsPerSecond: (after.statements - before.statements) / r.seconds,
      cpuUs: ((cpuSeconds(pid) - cpuBefore) * 1e6) / r.requests,
      rssMb: rssMb(pid, 'VmRSS'),
      errors: r.errors,
    }
    minutes.push(m)
    say(
      `${f(minute, 6)}  ${f(m.statements, 17)}  ${f(m.rps, 7)}  ${f(m.statementsPerSecond, 12)}  ${f(m.cpuUs, 10, 1)}  ${f(m.rssMb, 6)}`,
    )
    if (after.statements >= options.soakStatements) break
  }
  const first = minutes[0]
  const last = minutes.at(-1)
  if (first && last)
    say(
      `soak: last minute against the first: throughput ${(last.rps / first.rps).toFixed(2)}, CPU per request ${(last.cpuUs / first.cpuUs).toFixed(2)}, RSS ${first.rssMb.toFixed(0)} → ${last.rssMb.toFixed(0)} MB`,
    )
  return {
    connections,
    minutes,
    soakedAgainstNew: await bench.compare(
      `after the soak, ${connections} connections: the soaked service against a new one`,
      ['soaked', 'new'],
      [soaked, await spawnService('new', url)],
      { connections, rounds: 3 },
    ),
  }
}
