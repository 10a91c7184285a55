import { readFileSync } from 'node:fs'
import type { Sql } from 'postgres'
import { batchedRows, runPgbench } from './pgbench.ts'
import { cpuSeconds, type Running, serverCpuSeconds, stop } from './processes.ts'
import { idsAfter, runWrk, type WrkResult } from './wrk.ts'

/** The settings of one bench run, from the command line. */
export type BenchOptions = {
  readonly runs: number
  readonly seconds: number
  readonly warmup: number
  readonly flatSeconds: number
  readonly soakStatements: number
  readonly soakConnections: number
  readonly levels: readonly number[]
  readonly havePgbench: boolean
  /** Ids at random over the int64 range (`--ids random`) instead of counting up. */
  readonly randomIds: boolean
}

/**
 * One measured wrk run after a warm-up, with the CPU the target spent per request and the CPU
 * PostgreSQL spent per request (all its processes; NaN where the bench cannot see them).
 */
export type Measured = WrkResult & { cpuUs: number; dbCpuUs: number; rowsOk: boolean }

/** A comparison of two services: medians of the interleaved rounds. */
export type Comparison = Record<string, number>

/** Writes a line of the report. */
export const say = (line: string) => process.stdout.write(`${line}\n`)
export const median = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN
/** `n` with `d` decimals, right-aligned in `w` characters. */
export const f = (n: number, w: number, d = 0) => n.toFixed(d).padStart(w)

/**
 * What every phase shares: the database, the token, and the ids handed out so far (each wrk
 * run takes fresh ones, so every 200 is a new row). The phases get this and nothing global.
 */
export function createBench(options: BenchOptions, url: string, sql: Sql, token: string) {
  let nextId = 1n
  let postmaster: Promise<number | undefined> | undefined

  /**
   * CPU seconds of the PostgreSQL server (the postmaster and its processes), read from /proc by
   * way of its data folder's postmaster.pid: only for a server on this machine that this user may
   * read (the embedded one always). Backends that have exited count too (pgbench's).
   */
  async function databaseCpuSeconds(): Promise<number> {
    postmaster ??= sql<{ dir: string }[]>`select current_setting('data_directory') as dir`.then(
      ([row]) => {
        try {
          return Number(readFileSync(`${row?.dir}/postmaster.pid`, 'utf8').split('\n')[0])
        } catch {
          return undefined
        }
      },
      () => undefined,
    )
    const pid = await postmaster
    return pid === undefined ? Number.NaN : serverCpuSeconds(pid)
  }

  /**
   * One wrk run of `seconds` on fresh ids (`POST /plants`, or the bare server's POST): counting
   * up, or at random over the int64 range (`--ids random`, and always in the growth part).
   */
  async function load(
    target: { base: string },
    connections: number,
    seconds: number,
    {
      randomIds = options.randomIds,
      token: as = token,
      // Runs at once (one per service instance) each take ids from a first id of their own.
      firstId = nextId,
    }: { randomIds?: boolean; token?: string; firstId?: bigint } = {},
  ) {
    const r = await runWrk({
      url: target.base,
      token: as,
      connections,
      seconds,
      firstId,
      randomIds,
    })
    const after = idsAfter(firstId, r, connections)
    if (after > nextId) nextId = after
    return { ...r, first: firstId, next: nextId }
  }

  /** A warm-up, then a measured run with the CPU per request and a check that each 200 is a row. */
  async function measure(target: Running, connections: number): Promise<Measured> {
    const pid = target.child.pid ?? 0
    await load(target, connections, options.warmup)
    const cpuBefore = cpuSeconds(pid)
    const dbBefore = await databaseCpuSeconds()
    const r = await load(target, connections, options.seconds)
    const cpuUs = ((cpuSeconds(pid) - cpuBefore) * 1e6) / r.requests
    const dbCpuUs = (((await databaseCpuSeconds()) - dbBefore) * 1e6) / r.requests
    // Every 200 is a row: at least as many rows as answers (wrk may stop with requests unread).
    // At random ids the phases start from an empty table, so all of it counts.
    const [row] = options.randomIds
      ? await sql<{ n: number }[]>`select count(*)::int as n from plants`
      : await sql<{ n: number }[]>`
          select count(*)::int as n from plants
          where id >= ${String(r.first)}::int8 and id < ${String(r.next)}::int8`
    const rowsOk = target.name === 'HTTP ceiling' || (row?.n ?? 0) >= r.requests - r.errors
    const { first: _first, next: _next, ...result } = r
    return { ...result, cpuUs, dbCpuUs, rowsOk }
  }

  /**
   * pgbench's single-row inserts (or 30-row ones: `batched`) after a warm-up, with rows per
   * second and PostgreSQL's CPU per row.
   */
  async function measurePgbench(connections: number, { batched = false } = {}) {
    await runPgbench({ url, connections, seconds: options.warmup, batched })
    const dbBefore = await databaseCpuSeconds()
    const p = await runPgbench({ url, connections, seconds: options.seconds, batched })
    const rows = batched ? batchedRows : 1
    const dbCpuUs = (((await databaseCpuSeconds()) - dbBefore) * 1e6) / (p.transactions * rows)
    return { ...p, rowsPerSecond: p.tps * rows, dbCpuUs }
  }

  /** The same load against two services, interleaved, `rounds` rounds; stops both after. */
  async function compare(
    title: string,
    names: [string, string],
    services: [Running, Running],
    { connections = 64, rounds: roundCount = options.runs } = {},
  ): Promise<Comparison> {
    const [a, b] = names
    say('')
    say(title)
    say(
      `run  ${`${a} req/s`.padStart(14)}  ${'p99 ms'.padStart(7)}  ${'CPU µs/req'.padStart(10)}  |  ${`${b} req/s`.padStart(14)}  ${'p99 ms'.padStart(7)}  ${'CPU µs/req'.padStart(10)}  |  req/s ratio  CPU ratio`,
    )
    const rounds: [Measured, Measured][] = []
    for (let run = 1; run <= roundCount; run++) {
      const pair: Measured[] = []
      for (const index of run % 2 === 1 ? [0, 1] : [1, 0]) {
        await sql`truncate plants`
        pair[index] = await measure(services[index] as Running, connections)
      }
      const [x, y] = pair as [Measured, Measured]
      rounds.push([x, y])
      say(
        `${f(run, 3)}  ${f(x.rps, 14)}  ${f(x.p99, 7, 2)}  ${f(x.cpuUs, 10, 1)}  |  ${f(y.rps, 14)}  ${f(y.p99, 7, 2)}  ${f(y.cpuUs, 10, 1)}  |  ${f(x.rps / y.rps, 11, 3)}  ${f(x.cpuUs / y.cpuUs, 9, 3)}`,
      )
    }
    const m = {
      [`${a}Rps`]: median(rounds.map(([x]) => x.rps)),
      [`${b}Rps`]: median(rounds.map(([, y]) => y.rps)),
      [`${a}P99`]: median(rounds.map(([x]) => x.p99)),
      [`${b}P99`]: median(rounds.map(([, y]) => y.p99)),
      [`${a}CpuUs`]: median(rounds.map(([x]) => x.cpuUs)),
      [`${b}CpuUs`]: median(rounds.map(([, y]) => y.cpuUs)),
      ratio: median(rounds.map(([x, y]) => x.rps / y.rps)),
      cpuRatio: median(rounds.map(([x, y]) => x.cpuUs / y.cpuUs)),
      errors: rounds.reduce((sum, [x, y]) => sum + x.errors + y.errors, 0),
    }
    say(
      `medians: ${a}/${b} throughput ${m.ratio?.toFixed(3)}, CPU per request ${m.cpuRatio?.toFixed(3)} (${m[`${a}CpuUs`]?.toFixed(1)} against ${m[`${b}CpuUs`]?.toFixed(1)} µs); p99 ${m[`${a}P99`]?.toFixed(2)} against ${m[`${b}P99`]?.toFixed(2)} ms; errors ${m.errors}`,
    )
    for (const done of services) await stop(done)
    return m
  }

  return {
    options,
    url,
    sql,
    token,
    load,
    /** The first id the next run takes. */
    nextId: () => nextId,
    measure,
    measurePgbench,
    compare,
    databaseCpuSeconds,
  }
}

/** The shared bench a phase runs in. */
export type Bench = ReturnType<typeof createBench>
