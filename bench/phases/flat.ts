import { type Bench, median, say } from '../bench.ts'
import type { Running } from '../processes.ts'

/** A long run at 64 connections in 10 s slices, last against first, `runs` times. */
export async function flatPhase(bench: Bench, service: Running) {
  const { options, sql } = bench
  const runs: { slices: number[]; ratio: number }[] = []
  for (let run = 1; run <= options.runs; run++) {
    await sql`truncate plants`
    await bench.load(service, 64, options.warmup)
    const slices: number[] = []
    let errors = 0
    for (let s = 0; s < options.flatSeconds / 10; s++) {
      const r = await bench.load(service, 64, 10)
      slices.push(r.rps)
      errors += r.errors
    }
    const ratio = (slices.at(-1) ?? Number.NaN) / (slices[0] ?? Number.NaN)
    runs.push({ slices, ratio })
    say(
      `flat ${run}: ${options.flatSeconds} s at 64 connections in 10 s slices: ${slices.map((x) => x.toFixed(0)).join(', ')} req/s; last/first ${ratio.toFixed(2)}; errors ${errors}`,
    )
  }
  return { runs, medianRatio: median(runs.map((x) => x.ratio)) }
}
