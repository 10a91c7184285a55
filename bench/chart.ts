/** One level of the benchmark summary. */
export type LevelSummary = {
  connections: number
  serviceRps: number
  ceilingRps: number
  ratio: number
  p50: number
  p99: number
}

const escapeXml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;')

/** Five horizontal lines from 0 to `top` with their values at the left. */
function gridLines(
  top: number,
  y: (v: number) => number,
  left: number,
  right: number,
  label: (v: number) => string,
): string[] {
  return [0, 1, 2, 3, 4].flatMap((i) => {
    const v = (top * i) / 4
    return [
      `<line x1="${left}" x2="${right}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${left - 8}" y="${y(v) + 4}" text-anchor="end" font-size="12">${label(v)}</text>`,
    ]
  })
}

/** A grouped bar chart, service against pgbench per level, as a standalone SVG. */
export function renderChart(
  levels: readonly LevelSummary[],
  soakRatio: number,
  rssMb: number,
): string {
  const width = 760
  const height = 420
  const left = 80
  const bottom = 330
  const top = 70
  // The scale ends on a round number a little above the tallest bar.
  const top100 =
    Math.ceil((Math.max(...levels.flatMap((l) => [l.serviceRps, l.ceilingRps])) * 1.1) / 5000) *
    5000
  const y = (v: number) => bottom - ((bottom - top) * v) / top100
  const groupWidth = (width - left - 40) / levels.length
  const bar = groupWidth / 3.2
  const parts = gridLines(top100, y, left, width - 30, (v) => Math.round(v).toLocaleString('en'))
  levels.forEach((l, i) => {
    const x = left + i * groupWidth + groupWidth / 2
    parts.push(
      `<rect x="${x - bar - 2}" y="${y(l.serviceRps)}" width="${bar}" height="${bottom - y(l.serviceRps)}" fill="#2e7d32"/>`,
      `<rect x="${x + 2}" y="${y(l.ceilingRps)}" width="${bar}" height="${bottom - y(l.ceilingRps)}" fill="#90a4ae"/>`,
      `<text x="${x - bar / 2 - 2}" y="${y(l.serviceRps) - 6}" text-anchor="middle" font-size="12">${Math.round(l.serviceRps).toLocaleString('en')}</text>`,
      `<text x="${x + bar / 2 + 2}" y="${y(l.ceilingRps) - 6}" text-anchor="middle" font-size="12">${Math.round(l.ceilingRps).toLocaleString('en')}</text>`,
      `<text x="${x}" y="${bottom + 20}" text-anchor="middle" font-size="13">${l.connections} connections</text>`,
      `<text x="${x}" y="${bottom + 38}" text-anchor="middle" font-size="12">${l.ratio.toFixed(2)}× pgbench · p99 ${l.p99.toFixed(1)} ms</text>`,
    )
  })
  const title = 'POST /plants (green) against pgbench single-row inserts (grey), medians'
  const note = `60 s run at 64 connections: last/first 10 s = ${soakRatio.toFixed(2)} · peak RSS ${Math.round(rssMb)} MB`
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" role="img">
<title>${escapeXml(`${title}. ${levels.map((l) => `${l.connections} connections: ${Math.round(l.serviceRps)} requests/s against ${Math.round(l.ceilingRps)} inserts/s`).join('; ')}`)}</title>
<rect width="100%" height="100%" fill="white"/>
<text x="${width / 2}" y="28" text-anchor="middle" font-size="16">${escapeXml(title)}</text>
<text x="${width / 2}" y="50" text-anchor="middle" font-size="12" fill="#555">requests or inserts per second</text>
${parts.join('\n')}
<text x="${width / 2}" y="${height - 20}" text-anchor="middle" font-size="12" fill="#555">${escapeXml(note)}</text>
</svg>
`
}

/** Rows per insert statement at each level, as the service's own metrics report them. */
export function renderBatchChart(
  levels: readonly { connections: number; rowsPerStatement: number; serviceRps: number }[],
): string {
  const width = 560
  const height = 340
  const left = 70
  const bottom = 260
  const top = 70
  const most = Math.max(...levels.map((l) => l.rowsPerStatement))
  const scale = Math.max(5, Math.ceil((most * 1.15) / 5) * 5)
  const y = (v: number) => bottom - ((bottom - top) * v) / scale
  const groupWidth = (width - left - 30) / levels.length
  const bar = groupWidth / 2
  const parts = gridLines(scale, y, left, width - 20, (v) => v.toFixed(v % 1 ? 1 : 0))
  levels.forEach((l, i) => {
    const x = left + i * groupWidth + groupWidth / 2
    parts.push(
      `<rect x="${x - bar / 2}" y="${y(l.rowsPerStatement)}" width="${bar}" height="${bottom - y(l.rowsPerStatement)}" fill="#1565c0"/>`,
      `<text x="${x}" y="${y(l.rowsPerStatement) - 6}" text-anchor="middle" font-size="12">${l.rowsPerStatement.toFixed(1)}</text>`,
      `<text x="${x}" y="${bottom + 20}" text-anchor="middle" font-size="13">${l.connections} connections</text>`,
      `<text x="${x}" y="${bottom + 38}" text-anchor="middle" font-size="12">${Math.round(l.serviceRps).toLocaleString('en')} req/s</text>`,
    )
  })
  const title = 'Rows per insert statement (plant_store_create_batch_rows), medians'
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" role="img">
<title>${escapeXml(`${title}. ${levels.map((l) => `${l.connections} connections: ${l.rowsPerStatement.toFixed(1)} rows per statement`).join('; ')}`)}</title>
<rect width="100%" height="100%" fill="white"/>
<text x="${width / 2}" y="28" text-anchor="middle" font-size="15">${escapeXml(title)}</text>
<text x="${width / 2}" y="50" text-anchor="middle" font-size="12" fill="#555">more connections, fuller statements: one commit serves many creates</text>
${parts.join('\n')}
</svg>
`
}

/**
 * Latency against rate (bench/phases/rates.ts): p50 (dashed) and p99 (solid) of each target at
 * each share of the service's peak, on a logarithmic scale, as a standalone SVG.
 */
export function renderRatesChart(
  rates: readonly {
    share: number
    rate: number
    targets: Record<string, { p50: number; p99: number }>
  }[],
  peakRps: number,
): string {
  const width = 760
  const height = 440
  const left = 70
  const right = width - 150
  const top = 60
  const bottom = 360
  const colours: Record<string, string> = {
    service: '#2e7d32',
    baseline: '#ef6c00',
    floor: '#1565c0',
    fastify: '#8e24aa',
    'floor-pg': '#00838f',
    pgbench: '#616161',
  }
  const values = rates.flatMap((r) => Object.values(r.targets).flatMap((t) => [t.p50, t.p99]))
  const lo = 10 ** Math.floor(Math.log10(Math.max(0.01, Math.min(...values))))
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...values)))
  const y = (v: number) =>
    bottom - ((bottom - top) * (Math.log10(v) - Math.log10(lo))) / (Math.log10(hi) - Math.log10(lo))
  const x = (i: number) => left + ((right - left) * (i + 0.5)) / rates.length
  const parts: string[] = []
  for (let v = lo; v <= hi * 1.001; v *= 10)
    for (const m of [1, 2, 5]) {
      const at = v * m
      if (at > hi * 1.001) break
      parts.push(
        `<line x1="${left}" x2="${right}" y1="${y(at)}" y2="${y(at)}" stroke="${m === 1 ? '#ccc' : '#eee'}"/>`,
        `<text x="${left - 8}" y="${y(at) + 4}" text-anchor="end" font-size="12">${at >= 1 ? at : at.toFixed(2)}</text>`,
      )
    }
  rates.forEach((r, i) => {
    parts.push(
      `<text x="${x(i)}" y="${bottom + 20}" text-anchor="middle" font-size="13">${Math.round(r.share * 100)} %</text>`,
      `<text x="${x(i)}" y="${bottom + 37}" text-anchor="middle" font-size="12">${r.rate.toLocaleString('en')} /s</text>`,
    )
  })
  const names = [...new Set(rates.flatMap((r) => Object.keys(r.targets)))]
  names.forEach((name, n) => {
    const colour = colours[name] ?? '#000'
    for (const [key, dash] of [
      ['p99', ''],
      ['p50', ' stroke-dasharray="5 4"'],
    ] as const) {
      const points = rates
        .map((r, i) => {
          const t = r.targets[name]
          return t === undefined ? undefined : `${x(i)},${y(t[key])}`
        })
        .filter((p) => p !== undefined)
      parts.push(
        `<polyline points="${points.join(' ')}" fill="none" stroke="${colour}" stroke-width="2"${dash}/>`,
      )
    }
    parts.push(
      `<line x1="${right + 15}" x2="${right + 40}" y1="${top + 20 * n}" y2="${top + 20 * n}" stroke="${colour}" stroke-width="3"/>`,
      `<text x="${right + 46}" y="${top + 20 * n + 4}" font-size="13">${escapeXml(name)}</text>`,
    )
  })
  parts.push(
    `<text x="${right + 15}" y="${top + 20 * names.length + 10}" font-size="12">solid p99, dashed p50</text>`,
  )
  const title = `Latency of a create against rate (open loop; share of the peak, ${Math.round(peakRps).toLocaleString('en')} req/s)`
  const summary = rates
    .map(
      (r) =>
        `${Math.round(r.share * 100)} % (${r.rate} /s): ${Object.entries(r.targets)
          .map(([name, t]) => `${name} p50 ${t.p50.toFixed(2)} ms, p99 ${t.p99.toFixed(2)} ms`)
          .join(', ')}`,
    )
    .join('; ')
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" role="img">
<title>${escapeXml(`${title}. ${summary}`)}</title>
<rect width="100%" height="100%" fill="#fff"/>
<text x="${width / 2}" y="28" text-anchor="middle" font-size="15">${escapeXml(title)}</text>
<text x="18" y="${(top + bottom) / 2}" transform="rotate(-90 18 ${(top + bottom) / 2})" text-anchor="middle" font-size="12">ms (log scale)</text>
${parts.join('\n')}
</svg>
`
}
