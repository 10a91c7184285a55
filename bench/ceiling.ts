import postgres from 'postgres'
import type { LoadResult } from './load.ts'

/**
 * The database's own ceiling: single-row inserts issued straight from the driver, one statement
 * (and so one commit) per row, with `connections` of them in flight, no HTTP.
 */
export async function runCeiling(o: {
  url: string
  connections: number
  warmupSeconds: number
  seconds: number
  firstId: bigint
}): Promise<LoadResult & { nextId: bigint }> {
  const sql = postgres(o.url, { max: o.connections, onnotice: () => {} })
  let nextId = o.firstId
  const started = performance.now()
  const measureFrom = started + o.warmupSeconds * 1000
  const stopAt = measureFrom + o.seconds * 1000
  const latencies: number[] = []
  const perSecond: number[] = Array.from({ length: Math.ceil(o.seconds) }, () => 0)
  let ok = 0
  let totalOk = 0
  let errors = 0
  // Open every connection first, so that connecting is not measured.
  await Promise.all(Array.from({ length: o.connections }, () => sql`select 1`))
  async function loop(): Promise<void> {
    while (performance.now() < stopAt) {
      const id = String(nextId++)
      const sentAt = performance.now()
      try {
        await sql`insert into plants (id, name, tag, created_by) values (${id}::int8, 'bench plant', 'bench', 'bench')`
        const now = performance.now()
        totalOk++
        if (now >= measureFrom && now < stopAt) {
          ok++
          latencies.push(now - sentAt)
          const second = Math.floor((now - measureFrom) / 1000)
          perSecond[second] = (perSecond[second] ?? 0) + 1
        }
      } catch {
        errors++
      }
    }
  }
  await Promise.all(Array.from({ length: o.connections }, loop))
  await sql.end({ timeout: 5 })
  return {
    ok,
    totalOk,
    errors,
    seconds: o.seconds,
    latencies: Float64Array.from(latencies),
    perSecond,
    nextId,
  }
}
