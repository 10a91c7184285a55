// npm run dashboard-picture [-- --seconds 120]
// Draws docs/dashboard.svg: the panels of the Grafana dashboard (ops/grafana), each from its own
// queries, as a real Prometheus (Debian's) answered them after scraping the service every second
// through a run of load: creates from 8 loops, then 32, then 8 again; a few refused creates and
// bad tokens throughout; the database's connections to the service ended twice (a gap the
// service holds creates through); tokens that expire in 10 and in 40 days.

import { readFileSync } from 'node:fs'
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import postgres from 'postgres'
import { createToken } from '../src/auth/token-repository.ts'
import { startEmbedded } from '../src/db/start/embedded.ts'
import { migrate } from '../src/db/start/migrate.ts'
import { createLog } from '../src/log.ts'
import { isFailure } from '../src/outcome.ts'
import { driveCreates } from '../test/helpers/drive.ts'
import { type RangeResult, startPrometheus } from '../test/helpers/prometheus.ts'
import { say } from './bench.ts'
import { root, spawnService, stop } from './processes.ts'

const { values: args } = parseArgs({ options: { seconds: { type: 'string', default: '120' } } })
const seconds = Number(args.seconds)
const log = createLog('warn', (l) => process.stderr.write(l))
const cleanups: (() => unknown)[] = []
const cleanup = { after: (fn: () => unknown) => void cleanups.push(fn) }
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

type Panel = {
  title: string
  targets: { expr: string; legendFormat?: string }[]
  fieldConfig?: {
    defaults?: { unit?: string }
    overrides?: { matcher: { options: string }; properties: { id: string; value: string }[] }[]
  }
}
type Drawn = {
  title: string
  unit: string
  series: { name: string; points: [number, number][] }[]
  /** The series Grafana draws on a right axis of their own (an override), and its unit. */
  right?: { names: Set<string>; unit: string }
}

const dashboard = JSON.parse(
  readFileSync(join(root, 'ops', 'grafana', 'plant-store.dashboard.json'), 'utf8'),
) as { panels: Panel[] }

/** Grafana's `{{label}}` legend for one series. */
const legendOf = (format: string | undefined, metric: Record<string, string>) =>
  (format ?? JSON.stringify(metric)).replace(
    /\{\{\s*(\w+)\s*\}\}/g,
    (_, k: string) => metric[k] ?? '',
  )

/** Runs the load and the faults, then asks Prometheus for every panel over the run. */
async function measure(): Promise<{ panels: Drawn[]; seconds: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'plant-store-dashboard-'))
  // As root, the embedded PostgreSQL runs as postgres, which must be able to enter it.
  await chmod(dir, 0o755)
  cleanup.after(() => rm(dir, { recursive: true, force: true }))
  const db = await startEmbedded({ dir, log, shareRunning: false })
  cleanup.after(() => db.stop())
  await migrate(db.url, log)
  const sql = postgres(db.url, { max: 2, onnotice: () => {} })
  cleanup.after(() => sql.end())
  const token = await createToken(sql, 'load')
  if (isFailure(token)) throw new Error(token.message)
  for (const days of [10, 40])
    await createToken(sql, `expires-in-${days}-days`, new Date(Date.now() + days * 86_400_000))
  const service = await spawnService('service', db.url)
  cleanup.after(() => stop(service))
  const { queryRange } = await startPrometheus(new URL(service.base).host, cleanup)
  const start = Date.now() / 1000
  say(`dashboard: ${seconds} s of load on ${service.base}, scraped every second`)

  // Refused creates (40005) and bad tokens (401), a few a second, all along.
  let refusing = true
  const refusals = (async () => {
    while (refusing) {
      await fetch(`${service.base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: '{"name":""}',
      }).catch(() => undefined)
      await fetch(`${service.base}/plants`, {
        method: 'POST',
        headers: { authorization: 'Bearer pst_wrong', 'content-type': 'application/json' },
        body: '{}',
      }).catch(() => undefined)
      await sleep(200)
    }
  })()
  const phase = async (concurrency: number, share: number) => {
    const drive = driveCreates(service.base, token, { concurrency, pauseMs: 2 })
    await sleep(seconds * share * 1000)
    await drive.stop()
  }
  const gaps = (async () => {
    for (const at of [0.4, 0.65]) {
      await sleep(seconds * at * 1000 - (Date.now() / 1000 - start) * 1000)
      await sql`select pg_terminate_backend(pid) from pg_stat_activity
                where backend_type = 'client backend' and pid <> pg_backend_pid()`
    }
  })()
  await phase(8, 0.3)
  await phase(32, 0.3)
  await phase(8, 0.3)
  await gaps
  refusing = false
  await refusals
  await sleep(seconds * 0.1 * 1000)
  const end = Date.now() / 1000

  const panels: Drawn[] = []
  for (const panel of dashboard.panels) {
    const series: Drawn['series'] = []
    for (const target of panel.targets) {
      const promql = target.expr
        .replaceAll('$job', 'plant-store')
        .replaceAll('$__rate_interval', '10s')
      const answer: RangeResult = await queryRange(promql, start, end, 2)
      if (answer.status !== 'success') throw new Error(`${panel.title}: ${promql} failed`)
      for (const r of answer.data.result)
        series.push({
          name: legendOf(target.legendFormat, r.metric),
          points: r.values.map(([t, v]) => [t - start, Number(v)]),
        })
    }
    const onRight = (panel.fieldConfig?.overrides ?? []).filter((o) =>
      o.properties.some((p) => p.id === 'custom.axisPlacement' && p.value === 'right'),
    )
    const rightUnit = onRight[0]?.properties.find((p) => p.id === 'unit')?.value
    panels.push({
      title: panel.title,
      unit: panel.fieldConfig?.defaults?.unit ?? 'short',
      series,
      ...(onRight.length > 0 && {
        right: {
          names: new Set(onRight.map((o) => o.matcher.options)),
          unit: rightUnit ?? 'short',
        },
      }),
    })
  }
  return { panels, seconds: end - start }
}

const colours = [
  '#2e7d32',
  '#1565c0',
  '#ef6c00',
  '#6a1b9a',
  '#c62828',
  '#00838f',
  '#5d4037',
  '#9e9d24',
]
const escapeXml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;')

/** A value as the panel's unit shows it. */
function shown(v: number, unit: string): string {
  if (unit === 's') return v < 1 ? `${+(v * 1000).toPrecision(3)} ms` : `${+v.toPrecision(3)} s`
  if (unit === 'reqps' || unit === 'ops') return `${+v.toPrecision(3)}/s`
  if (unit === 'd') return `${+v.toPrecision(3)} d`
  return `${+v.toPrecision(3)}`
}

/** A scale's top: 1, 2 or 5 times a power of ten, at or above `v`. */
function niceTop(v: number): number {
  if (!(v > 0)) return 1
  const p = 10 ** Math.floor(Math.log10(v))
  return ([1, 2, 5, 10].find((m) => m * p >= v) ?? 10) * p
}

/** One panel at (x, y), `w` by `h`: title, grid, a line per series, the legend. */
function drawPanel(
  panel: Drawn,
  x: number,
  y: number,
  w: number,
  h: number,
  span: number,
): string[] {
  const left = x + 64
  const right = x + w - (panel.right ? 56 : 12)
  const top = y + 30
  const bottom = y + h - 44
  const onRight = (name: string) => panel.right?.names.has(name) === true
  const topOf = (side: boolean) =>
    niceTop(
      Math.max(
        0,
        ...panel.series
          .filter((s) => onRight(s.name) === side)
          .flatMap((s) => s.points.map(([, v]) => v))
          .filter(Number.isFinite),
      ),
    )
  const max = topOf(false)
  const maxRight = topOf(true)
  const px = (t: number) => left + ((right - left) * t) / span
  const py = (v: number, side = false) => bottom - ((bottom - top) * v) / (side ? maxRight : max)
  const out = [
    `<rect x="${x + 4}" y="${y + 4}" width="${w - 8}" height="${h - 8}" rx="4" fill="#fff" stroke="#ccc"/>`,
    `<text x="${x + 14}" y="${y + 22}" font-size="13" font-weight="bold">${escapeXml(panel.title)}</text>`,
  ]
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4
    out.push(
      `<line x1="${left}" x2="${right}" y1="${py(v)}" y2="${py(v)}" stroke="#eee"/>`,
      `<text x="${left - 6}" y="${py(v) + 4}" text-anchor="end" font-size="10">${shown(v, panel.unit)}</text>`,
    )
    if (panel.right)
      out.push(
        `<text x="${right + 6}" y="${py(v) + 4}" font-size="10">${shown((maxRight * i) / 4, panel.right.unit)}</text>`,
      )
  }
  for (let t = 0; t <= span; t += 30)
    out.push(
      `<text x="${px(t)}" y="${bottom + 13}" text-anchor="middle" font-size="10">${t} s</text>`,
    )
  // The legend flows left to right; with many series, those that stayed at 0 are only counted.
  const many = panel.series.length > 6
  let lx = left
  let ly = bottom + 27
  let quiet = 0
  panel.series.forEach((s, i) => {
    const colour = colours[i % colours.length]
    const path = s.points
      .filter(([, v]) => Number.isFinite(v))
      .map(
        ([t, v], j) =>
          `${j === 0 ? 'M' : 'L'}${px(t).toFixed(1)},${py(v, onRight(s.name)).toFixed(1)}`,
      )
      .join(' ')
    if (path !== '')
      out.push(`<path d="${path}" fill="none" stroke="${colour}" stroke-width="1.5"/>`)
    if (many && s.points.every(([, v]) => v === 0)) {
      quiet++
      return
    }
    const label = escapeXml(`${s.name.slice(0, 40)}${onRight(s.name) ? ' (right)' : ''}`)
    const width = 22 + label.length * 5.6
    if (lx + width > right) {
      lx = left
      ly += 12
    }
    out.push(
      `<rect x="${lx}" y="${ly - 8}" width="10" height="3" fill="${colour}"/>`,
      `<text x="${lx + 14}" y="${ly - 3}" font-size="10">${label}</text>`,
    )
    lx += width
  })
  if (quiet > 0)
    out.push(
      `<text x="${lx}" y="${ly - 3}" font-size="10" fill="#888">(${quiet} more, at 0 throughout)</text>`,
    )
  if (panel.series.length === 0)
    out.push(
      `<text x="${(left + right) / 2}" y="${(top + bottom) / 2}" text-anchor="middle" font-size="12" fill="#888">no data</text>`,
    )
  return out
}

try {
  const { panels, seconds: span } = await measure()
  const w = 520
  const h = 230
  const columns = 2
  const width = w * columns
  const height = 50 + h * Math.ceil(panels.length / columns)
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif">`,
    '<title>The plant store dashboard: every panel from its queries, answered by Prometheus</title>',
    `<rect width="100%" height="100%" fill="#f4f5f5"/>`,
    `<text x="14" y="30" font-size="16" font-weight="bold">ops/grafana/plant-store.dashboard.json, each panel drawn from its own queries, answered by Prometheus (${Math.round(span)} s)</text>`,
    ...panels.flatMap((p, i) =>
      drawPanel(p, (i % columns) * w, 44 + Math.floor(i / columns) * h, w, h, Math.ceil(span)),
    ),
    '</svg>',
  ]
  const file = join(root, 'docs', 'dashboard.svg')
  await writeFile(file, `${parts.join('\n')}\n`)
  say(
    `dashboard: ${panels.length} panels, ${panels.reduce((n, p) => n + p.series.length, 0)} series; wrote ${file}`,
  )
} finally {
  for (const fn of cleanups.reverse()) await fn()
}
