// npx tsx bench/profile-areas.ts [--skip SECONDS] FILE.cpuprofile [...]
// Splits the on-CPU samples of V8 CPU profiles (node --cpu-prof) by area: Node's HTTP server,
// sockets and streams, the postgres driver, promises and timers, GC, and each of our own steps.
// Each sample goes to the area of the frame it was taken in (self time); native frames (the
// HTTP parser, writev, SHA-256) count for the JavaScript frame that called them, found by their
// name. --skip leaves out the first seconds of each profile (start-up and warm-up); --top N
// lists the N heaviest functions of each area.
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'

const { values, positionals } = parseArgs({
  options: { skip: { type: 'string', default: '0' }, top: { type: 'string', default: '0' } },
  allowPositionals: true,
})
const skipUs = Number(values.skip) * 1e6

type Node = {
  id: number
  callFrame: { functionName: string; url: string }
  children?: number[]
}
type Profile = { nodes: Node[]; samples: number[]; timeDeltas: number[] }

/** The area of a frame, by where its code lives (first match wins). */
const areas: [string, (name: string, url: string) => boolean][] = [
  ['idle (waiting for I/O)', (n) => n === '(idle)'],
  ['GC', (n) => n === '(garbage collector)'],
  ['our token check (bearer, SHA-256, cache)', (_, u) => /src\/auth\//.test(u)],
  [
    'our body parse (UTF-8, JSON, exact id)',
    (_, u) => /src\/(http\/body|plants\/parse-json)/.test(u),
  ],
  ['our validation (Valibot)', (_, u) => /src\/plants\/schema|node_modules\/valibot/.test(u)],
  [
    'our create handler and batching',
    (_, u) => /src\/plants\/(create-plant|repository)|src\/db\//.test(u),
  ],
  [
    'OpenTelemetry (spans: the SDK, the exporter, src/tracing)',
    (_, u) => /node_modules\/@opentelemetry|src\/tracing\//.test(u),
  ],
  ['our HTTP adapter (ids, trace, answer)', (_, u) => /src\/http\/|src\/app/.test(u)],
  ['our request log', (_, u) => /src\/log/.test(u)],
  ['our metrics', (_, u) => /src\/(fast-metric|metrics)|node_modules\/prom-client/.test(u)],
  ['the postgres driver', (_, u) => /node_modules\/postgres\//.test(u)],
  ['crypto (SHA-256, random bytes)', (_, u) => /internal\/crypto/.test(u)],
  [
    'promises and timers',
    (n, u) =>
      /internal\/(process\/task_queues|timers)|^timers$|node:timers/.test(u) ||
      n === 'processTicksAndRejections' ||
      n === 'runMicrotasks',
  ],
  [
    'Node HTTP server (parser, headers, responses)',
    (n, u) => /_http_|node:http/.test(u) || n === 'execute' || n === 'parserOnHeadersComplete',
  ],
  [
    'sockets and streams (net, writev, reads)',
    (n, u) =>
      /node:net|internal\/stream|node:stream|internal\/streams|node:events|events/.test(u) ||
      /^(writev|writeBuffer|writeUtf8String|writeLatin1String|onStreamRead|shutdown)$/.test(n),
  ],
  ['other Node built-ins', (_, u) => /^node:|^internal\//.test(u)],
  ['program (native, outside JavaScript)', (n) => n === '(program)'],
  ['other', () => true],
]

const totals = new Map<string, number>()
const frames = new Map<string, Map<string, number>>()
let all = 0
for (const file of positionals) {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const areaOf = new Map<number, string>()
  const classify = (id: number): string => {
    const known = areaOf.get(id)
    if (known !== undefined) return known
    const n = byId.get(id)
    let area = 'other'
    if (n) {
      const { functionName: name, url } = n.callFrame
      // A native frame without a URL belongs to the JavaScript frame that called it.
      const up = parent.get(id)
      if (
        url === '' &&
        !name.startsWith('(') &&
        up !== undefined &&
        !/^(execute|writev|writeBuffer|writeUtf8String|writeLatin1String|onStreamRead|shutdown)$/.test(
          name,
        )
      )
        area = classify(up)
      else area = areas.find(([, test]) => test(name, url))?.[0] ?? 'other'
    }
    areaOf.set(id, area)
    return area
  }
  let at = 0
  p.samples.forEach((id, i) => {
    const us = p.timeDeltas[i] ?? 0
    at += us
    if (at < skipUs) return
    const area = classify(id)
    totals.set(area, (totals.get(area) ?? 0) + us)
    const frame = byId.get(id)?.callFrame
    const name = `${frame?.functionName || '(anonymous)'} ${frame?.url.replace(/^.*\/(node_modules|src)\//, '$1/') ?? ''}`
    const inArea = frames.get(area) ?? new Map<string, number>()
    inArea.set(name, (inArea.get(name) ?? 0) + us)
    frames.set(area, inArea)
    all += us
  })
}
const idle = totals.get('idle (waiting for I/O)') ?? 0
const busy = all - idle
process.stdout.write(
  `on-CPU time ${(busy / 1e6).toFixed(2)} s of ${(all / 1e6).toFixed(2)} s sampled\n`,
)
for (const [area, us] of [...totals].sort((a, b) => b[1] - a[1])) {
  if (area === 'idle (waiting for I/O)') continue
  process.stdout.write(`${((100 * us) / busy).toFixed(1).padStart(5)} %  ${area}\n`)
  const heaviest = [...(frames.get(area) ?? [])].sort((a, b) => b[1] - a[1])
  for (const [name, t] of heaviest.slice(0, Number(values.top)))
    process.stdout.write(`         ${((100 * t) / busy).toFixed(1).padStart(5)} %  ${name}\n`)
}
