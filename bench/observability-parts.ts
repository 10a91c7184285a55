// npx tsx bench/observability-parts.ts
// The CPU cost per request of each part of the metrics and trace context, each in a loop of a
// million calls: what the side-by-side run in `npm run bench` is too noisy to resolve here.
import { createMetrics } from '../src/metrics/metrics.ts'

const metrics = createMetrics()
const calls = 1_000_000

function perCall(run: () => void): number {
  for (let i = 0; i < 100_000; i++) run()
  const started = performance.now()
  for (let i = 0; i < calls; i++) run()
  return ((performance.now() - started) * 1000) / calls
}

const line = {
  time: new Date().toISOString(),
  level: 'info',
  message: 'request',
  requestId: '5f0c6c1e-0d5e-4b3a-9d7e-8f0a1b2c3d4e',
  method: 'POST',
  path: '/plants',
  status: 200,
  durationMs: 3.21,
  tokenName: 'bench',
}
const traced = { ...line, traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7' }
const { randomHex } = await import('../src/http/trace-context.ts')

const parts = {
  'request counter and duration histogram': perCall(() =>
    metrics.requestAnswered('POST', '/plants', 200, 0.004),
  ),
  'create outcome counter': perCall(() => metrics.createAnswered('created')),
  'trace and span id (24 random bytes as hex)': perCall(() => {
    randomHex(16)
    randomHex(8)
  }),
  'log line without trace ids': perCall(() => JSON.stringify(line)),
  'log line with trace ids': perCall(() => JSON.stringify(traced)),
}
for (const [part, us] of Object.entries(parts)) {
  process.stdout.write(`${us.toFixed(3).padStart(7)} µs  ${part}\n`)
}
const added =
  parts['request counter and duration histogram'] +
  parts['create outcome counter'] +
  parts['trace and span id (24 random bytes as hex)'] +
  parts['log line with trace ids'] -
  parts['log line without trace ids']
process.stdout.write(`${added.toFixed(3).padStart(7)} µs  added per create in all\n`)
