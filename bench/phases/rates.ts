import { seeded, shuffled } from '../../test/helpers/history.ts'
import { type Bench, f, median, say } from '../bench.ts'
import {
  type LatencyFigures,
  type OpenLoopResult,
  runOpenLoop,
  runPgbenchAtRate,
} from '../open-loop.ts'
import { singleInsertScript } from '../pgbench.ts'
import { type Running, spawnFastify, spawnFloor, spawnService, stop } from '../processes.ts'

/** The shares of the service's peak at which latency is measured. */
export const rateShares = [0.05, 0.1, 0.25, 0.5, 0.75] as const

/** The medians of one target at one rate, over the interleaved rounds. */
export type RateFigures = {
  p50: number
  p99: number
  p999: number
  max: number
  lagP99: number
  errors: number
}

/**
 * One target against a reference (Fastify + pg, pgbench) at one rate, round by round: each
 * round's figures divided by the reference's in the same round (the rounds interleave the
 * targets), the median of those ratios, and in how many rounds the target was slower. A
 * median of medians hides how often a small gap goes one way: nine rounds that each put the
 * target 1.05 × slower say more than one median of 1.05.
 */
export type Paired = {
  readonly against: string
  readonly rounds: number
  readonly p50: number
  readonly p99: number
  readonly slowerP50: number
  readonly slowerP99: number
}

/** One rate: each target's medians, each round's figures, and the targets round by round. */
export type RateSummary = {
  share: number
  rate: number
  targets: Record<string, RateFigures>
  rounds: Record<string, Pick<LatencyFigures, 'p50' | 'p99' | 'p999'>[]>
  paired: Record<string, Paired[]>
}

const CONNECTIONS = 256

function medians(rows: LatencyFigures[]): RateFigures {
  return {
    p50: median(rows.map((r) => r.p50)),
    p99: median(rows.map((r) => r.p99)),
    p999: median(rows.map((r) => r.p999)),
    max: median(rows.map((r) => r.max)),
    lagP99: median(rows.map((r) => r.lagP99)),
    errors: rows.reduce((sum, r) => sum + r.errors + r.unavailable + r.otherStatus, 0),
  }
}

/** `a` against `against`'s `b`, round by round (`Paired`). */
export function paired(
  a: readonly LatencyFigures[],
  b: readonly LatencyFigures[],
  against: string,
): Paired {
  const rounds = [...Array(Math.min(a.length, b.length)).keys()].flatMap((i) => {
    const x = a[i]
    const y = b[i]
    return x === undefined || y === undefined ? [] : [{ x, y }]
  })
  return {
    against,
    rounds: rounds.length,
    p50: median(rounds.map(({ x, y }) => x.p50 / y.p50)),
    p99: median(rounds.map(({ x, y }) => x.p99 / y.p99)),
    slowerP50: rounds.filter(({ x, y }) => x.p50 > y.p50).length,
    slowerP99: rounds.filter(({ x, y }) => x.p99 > y.p99).length,
  }
}

/** The targets judged round by round, and the references they are judged against. */
const judged = ['service', 'node24', 'baseline']
const references = ['fastify', 'pgbench']
/**
 * At a fixed rate, a median over this many ms says the target fell behind its schedule (its
 * backlog grew through the run, as Fastify + pg's does at half the peak): a ratio to it says
 * nothing of the target judged, and is not printed.
 */
const behindMs = 100
const fellBehind = (m: RateFigures | undefined) => (m?.p50 ?? 0) > behindMs

/**
 * The targets in the order of one round: shuffled (Fisher-Yates on a generator seeded with
 * `seed`, the same each time), so that no target always runs right after the same other one,
 * as an order that only rotates keeps it (the service always ran right after pgbench:
 * BENCHMARKS.md, "A target's place in the rates part").
 */
export function roundOrder<T>(targets: readonly T[], seed: number): T[] {
  return shuffled(targets, seeded(Math.floor(seed * 1_000_003)))
}

/**
 * Latency at fixed rates, as clients meet a service below its peak: requests on a schedule
 * whatever the answers (bench/open-loop.c, 256 keep-alive connections, latency from each
 * request's due time), at 5 to 75 % of the service's peak (`peak`, or measured here with wrk
 * at 64 connections), side by side with pgbench `-R` (single-row inserts at the same rate) and
 * the floor (bench/floor-server.ts), Fastify 5 + pg (bench/fastify-pg.ts), with `baseline`
 * (another checkout's service) when given, and with `node24` the same service on Node 24 (the
 * runtime the image ships) when that binary is found.
 * Each target first serves `settleSeconds` at a quarter of the peak, not counted, so that the
 * rates compare steady states (V8 goes on compiling for a new instance's first thousands of
 * creates; a fresh instance is the last part's). Each run follows a `TRUNCATE` and a
 * `CHECKPOINT`; the targets' order is shuffled each round (`roundOrder`).
 * Then `freshRuns` new instances each take `freshSeconds` at 10 % as soon as `/readyz` says 200,
 * against the same instance's steady figures after.
 */
export async function ratesPhase(
  bench: Bench,
  {
    peak,
    baseline,
    freshSeconds,
    freshRuns = bench.options.runs,
    settleSeconds = 10,
    shares = rateShares,
    floorPg = false,
    node24,
  }: {
    peak?: number | undefined
    baseline?: string | undefined
    freshSeconds: number
    freshRuns?: number
    /** Seconds each target serves at a quarter of the peak before the first rate, not counted. */
    settleSeconds?: number
    shares?: readonly number[]
    /** Also the floor on `pg` (`--floor-pg`): the same design on the other driver. */
    floorPg?: boolean
    /** A Node 24 binary: the service on it too, as the image runs it (`node24`). */
    node24?: string | undefined
  },
) {
  const { options, sql, token } = bench
  const service = await spawnService('service', bench.url)
  let peakRps = peak
  if (peakRps === undefined) {
    await sql`truncate plants`
    peakRps = (await bench.measure(service, 64)).rps
  }
  say('')
  say(
    `rates: open loop, ${CONNECTIONS} connections, uniform arrivals, ${options.warmup} s warm-up + ${options.seconds} s per run, at shares of the service's peak ${Math.round(peakRps)} req/s (${peak === undefined ? 'wrk, 64 connections, measured now' : '--peak'}); latency from the due time, ms`,
  )
  const targets: { name: string; running?: Running }[] = [
    { name: 'service', running: service },
    { name: 'floor', running: await spawnFloor(bench.url) },
    { name: 'fastify', running: await spawnFastify(bench.url, token) },
  ]
  if (floorPg) targets.push({ name: 'floor-pg', running: await spawnFloor(bench.url, 'pg') })
  if (node24 !== undefined)
    targets.push({
      name: 'node24',
      running: await spawnService('service on node 24', bench.url, {}, { node: node24 }),
    })
  if (baseline !== undefined)
    targets.push({
      name: 'baseline',
      running: await spawnService('baseline', bench.url, {}, { cwd: baseline }),
    })
  if (options.havePgbench) targets.push({ name: 'pgbench' })

  /** An open-loop run on `running` from an empty table after a checkpoint; every 200 a row. */
  async function fromEmpty(running: Running, rate: number, warmup: number, seconds: number) {
    await sql`truncate plants`
    await sql`checkpoint`
    const r = await runOpenLoop({
      base: running.base,
      token,
      rate,
      warmup,
      seconds,
      connections: CONNECTIONS,
      firstId: 1n,
    })
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from plants`
    if ((row?.n ?? 0) < r.ok)
      throw new Error(`${running.name}: ${r.ok} answered 200, ${row?.n} rows`)
    return r
  }

  async function runOnce(target: (typeof targets)[number], rate: number): Promise<LatencyFigures> {
    if (target.running !== undefined)
      return fromEmpty(target.running, rate, options.warmup, options.seconds)
    await sql`truncate plants`
    await sql`checkpoint`
    return runPgbenchAtRate({
      url: bench.url,
      script: singleInsertScript,
      rate,
      warmup: options.warmup,
      seconds: options.seconds,
    })
  }

  // Every target started in this part (the service too, when --peak spared it the wrk run)
  // serves the same uncounted load first: its first seconds are a fresh instance's.
  if (settleSeconds > 0) {
    const settleRate = Math.round(peakRps * 0.25)
    for (const target of targets) {
      if (target.running === undefined) continue
      const r = await fromEmpty(target.running, settleRate, 0, settleSeconds)
      say(
        `  settled ${target.name}: ${settleSeconds} s at ${settleRate} /s, not counted (p99 ${f(r.p99, 6, 2)})`,
      )
    }
  }

  const summary: RateSummary[] = []
  for (const share of shares) {
    const rate = Math.round(peakRps * share)
    const rows = new Map<string, LatencyFigures[]>(targets.map((t) => [t.name, []]))
    for (let round = 0; round < options.runs; round++) {
      const order = roundOrder(targets, round + share)
      for (const target of order) {
        rows.get(target.name)?.push(await runOnce(target, rate))
      }
    }
    const figures = Object.fromEntries(
      [...rows].map(([name, rs]) => [name, medians(rs)]),
    ) as Record<string, RateFigures>
    const rounds = Object.fromEntries(
      [...rows].map(([name, rs]) => [name, rs.map(({ p50, p99, p999 }) => ({ p50, p99, p999 }))]),
    )
    const pairs = Object.fromEntries(
      judged.flatMap((name) => {
        const own = rows.get(name)
        if (own === undefined) return []
        return [
          [
            name,
            references.flatMap((ref) => {
              const theirs = rows.get(ref)
              return theirs === undefined || fellBehind(figures[ref])
                ? []
                : [paired(own, theirs, ref)]
            }),
          ],
        ]
      }),
    )
    summary.push({ share, rate, targets: figures, rounds, paired: pairs })
    say(`${f(share * 100, 3)} % = ${rate} /s`)
    /** `m` against the reference `ref` (pgbench, Fastify), when it ran and is not `m` itself. */
    const versus = (ref: string, name: string, m: RateFigures) => {
      const r = figures[ref]
      if (r === undefined || name === ref || name === 'pgbench') return ''
      return fellBehind(r)
        ? `  (${ref} fell behind)`
        : `  ÷ ${ref} p50 ${f(m.p50 / r.p50, 4, 2)} p99 ${f(m.p99 / r.p99, 4, 2)}`
    }
    for (const [name, m] of Object.entries(figures)) {
      // A generator late by a quarter of the p99 measured itself as much as the target.
      const mark = fellBehind(m)
        ? ' (fell behind its schedule)'
        : m.lagP99 > m.p99 / 4
          ? ' (generator lag: measured the generator)'
          : ''
      const vs = versus('pgbench', name, m) + versus('fastify', name, m)
      say(
        `  ${name.padEnd(9)} p50 ${f(m.p50, 6, 2)}  p99 ${f(m.p99, 6, 2)}  p99.9 ${f(m.p999, 6, 2)}  max ${f(m.max, 7, 2)}  lag p99 ${f(m.lagP99, 5, 2)}  errors ${m.errors}${vs}${mark}`,
      )
    }
    for (const [name, against] of Object.entries(pairs))
      for (const p of against)
        say(
          `  ${name} ÷ ${p.against}, round by round: p50 ${f(p.p50, 4, 2)} (slower in ${p.slowerP50} of ${p.rounds}), p99 ${f(p.p99, 4, 2)} (slower in ${p.slowerP99} of ${p.rounds})`,
        )
  }
  for (const t of targets) if (t.running) await stop(t.running)

  // A fresh instance's first seconds at 10 %, against its own steady figures right after; each
  // run follows a TRUNCATE and a CHECKPOINT, without warm-up, so that only the instance differs.
  const freshRate = Math.round(peakRps * 0.1)
  const kinds: { name: string; cwd?: string }[] = [{ name: 'service' }]
  if (baseline !== undefined) kinds.push({ name: 'baseline', cwd: baseline })
  const fresh: { name: string; first: OpenLoopResult; steady: OpenLoopResult }[] = []
  for (let run = 1; run <= freshRuns; run++)
    for (const kind of run % 2 === 1 ? kinds : [...kinds].reverse()) {
      const instance = await spawnService(
        `fresh ${kind.name}`,
        bench.url,
        {},
        kind.cwd === undefined ? {} : { cwd: kind.cwd },
      )
      const first = await fromEmpty(instance, freshRate, 0, freshSeconds)
      const steady = await fromEmpty(instance, freshRate, 0, freshSeconds)
      await stop(instance)
      fresh.push({ name: kind.name, first, steady })
      say(
        `fresh ${kind.name} ${run}: first ${freshSeconds} s at ${freshRate} /s after /readyz said 200: p99 ${f(first.p99, 6, 2)} p99.9 ${f(first.p999, 6, 2)} max ${f(first.max, 7, 2)} (first second: p99 ${f(first.firstSecondP99, 6, 2)} max ${f(first.firstSecondMax, 7, 2)}; of the slowest hundredth, ${first.slowestInFirstTwoSeconds} of ${first.slowest} due in the first 2 s); the same instance after: p99 ${f(steady.p99, 6, 2)} p99.9 ${f(steady.p999, 6, 2)}; first/steady p99 ${f(first.p99 / steady.p99, 4, 2)} p99.9 ${f(first.p999 / steady.p999, 4, 2)}`,
      )
    }
  const freshRatios = Object.fromEntries(
    kinds.map(({ name }) => {
      const runs = fresh.filter((x) => x.name === name)
      return [
        name,
        {
          p99: median(runs.map((x) => x.first.p99 / x.steady.p99)),
          p999: median(runs.map((x) => x.first.p999 / x.steady.p999)),
          firstSecondP99: median(runs.map((x) => x.first.firstSecondP99)),
          slowestEarly: median(
            runs.map((x) => x.first.slowestInFirstTwoSeconds / Math.max(1, x.first.slowest)),
          ),
        },
      ]
    }),
  )
  // With --fresh-runs 0 there is nothing to summarise.
  for (const [name, r] of freshRuns > 0 ? Object.entries(freshRatios) : [])
    say(
      `fresh ${name} medians: first/steady p99 ${r.p99.toFixed(2)}, p99.9 ${r.p999.toFixed(2)}; first second's p99 ${r.firstSecondP99.toFixed(2)} ms; ${Math.round(r.slowestEarly * 100)} % of the first run's slowest hundredth due in its first 2 s`,
    )
  return { peakRps, summary, fresh, freshRatios }
}
