import { spawn } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { serverPort } from './ports.ts'
import { tempDir } from './temp-dir.ts'
import { within } from './wait.ts'

/** Debian's prometheus package ships both (PROMETHEUS_PATH, PROMTOOL_PATH elsewhere). */
export const prometheus = process.env.PROMETHEUS_PATH || '/usr/bin/prometheus'
export const promtool = process.env.PROMTOOL_PATH || '/usr/bin/promtool'

/** An instant query's answer from Prometheus' HTTP API. */
export type QueryResult = {
  status: string
  data: { result: { metric: Record<string, string>; value: [number, string] }[] }
}

/** A range query's answer: each series' samples, `[unix seconds, value]`. */
export type RangeResult = {
  status: string
  data: { result: { metric: Record<string, string>; values: [number, string][] }[] }
}

/**
 * A real Prometheus scraping `target` every second as the job `plant-store`, stopped after `t`.
 */
export async function startPrometheus(
  target: string,
  t: { after: (fn: () => unknown) => void },
): Promise<{
  query: (promql: string) => Promise<QueryResult>
  queryRange: (promql: string, start: number, end: number, step: number) => Promise<RangeResult>
}> {
  const { dir, ...tmp } = await tempDir(t, 'plant-store-prometheus-')
  await writeFile(
    join(dir, 'prometheus.yml'),
    [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      'scrape_configs:',
      '  - job_name: plant-store',
      `    static_configs: [{ targets: ["${target}"] }]`,
      '',
    ].join('\n'),
  )
  const port = await serverPort()
  const server = spawn(
    prometheus,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  )
  let log = ''
  server.stderr.on('data', (c: Buffer) => {
    log += c.toString()
  })
  const exited = new Promise((r) => server.on('exit', r))
  tmp.after(async () => {
    server.kill('SIGTERM')
    await exited
  })
  const api = `http://127.0.0.1:${port}`
  const query = async (promql: string) => {
    const res = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(promql)}`)
    return (await res.json()) as QueryResult
  }
  const queryRange = async (promql: string, start: number, end: number, step: number) => {
    const res = await fetch(
      `${api}/api/v1/query_range?query=${encodeURIComponent(promql)}&start=${start}&end=${end}&step=${step}`,
    )
    return (await res.json()) as RangeResult
  }
  await within(
    30_000,
    async () => (await fetch(`${api}/-/ready`).catch(() => undefined))?.ok === true,
  ).catch(() => {
    throw new Error(`Prometheus did not become ready: ${log.slice(-2000)}`)
  })

  return { query, queryRange }
}
