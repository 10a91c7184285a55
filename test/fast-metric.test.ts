import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import {
  Counter,
  Histogram,
  type MetricObjectWithValues,
  type MetricValue,
  Registry,
} from 'prom-client'
import { fastCounter, fastHistogram, fastPlainHistogram } from '../src/metrics/fast-metric.ts'

// The fast metrics must read exactly as prom-client's own would for the same observations.

const buckets = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5]

/** Every series of a registry as sorted `name{labels} value` lines. */
async function series(registry: Registry): Promise<string[]> {
  const metrics = (await registry.getMetricsAsJSON()) as MetricObjectWithValues<
    MetricValue<string>
  >[]
  return metrics
    .flatMap((m) =>
      m.values.map((v) => {
        const labels = Object.entries(v.labels)
          .map(([k, l]) => `${k}=${String(l)}`)
          .sort()
          .join(',')
        const name = (v as { metricName?: string }).metricName ?? m.name
        return `${m.type} ${name}{${labels}} ${v.value}`
      }),
    )
    .sort()
}

describe('fastHistogram and fastCounter against prom-client', () => {
  test('a fastHistogram reads as prom-client’s Histogram for the same observations, bucket bounds included', async () => {
    const observation = fc.record({
      route: fc.constantFrom('/plants', '/healthz', '/readyz'),
      value: fc.oneof(
        fc.constantFrom(...buckets, 0, 10),
        fc.double({ min: 0, max: 10, noNaN: true }),
      ),
    })
    await fc.assert(
      fc.asyncProperty(fc.array(observation, { maxLength: 200 }), async (observations) => {
        const ours = new Registry()
        const theirs = new Registry()
        const fast = fastHistogram('d_seconds', 'help', 'route', buckets)
        ours.registerMetric(fast.metric)
        const reference = new Histogram({
          name: 'd_seconds',
          help: 'help',
          labelNames: ['route'],
          buckets,
          registers: [theirs],
        })
        for (const { route, value } of observations) {
          fast.observe(route, value)
          reference.observe({ route }, value)
        }
        assert.deepEqual(await series(ours), await series(theirs))
      }),
      { numRuns: 200, seed: 16 },
    )
  })

  test('a fastCounter reads as prom-client’s Counter for the same increments', async () => {
    const ours = new Registry()
    const theirs = new Registry()
    const fast = fastCounter('r_total', 'help', ['method', 'status'])
    ours.registerMetric(fast.metric)
    const reference = new Counter({
      name: 'r_total',
      help: 'help',
      labelNames: ['method', 'status'],
      registers: [theirs],
    })
    for (let i = 0; i < 500; i++) {
      const method = ['GET', 'POST', 'HEAD'][i % 3] ?? ''
      const status = ['200', '400', '503', '200'][i % 4] ?? ''
      fast.inc(method, status)
      reference.inc({ method, status })
    }
    assert.deepEqual(await series(ours), await series(theirs))
  })
  test('a fastPlainHistogram reads as prom-client’s unlabelled Histogram, zeros before any observation', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(fc.constantFrom(...buckets, 0, 10), fc.double({ min: 0, max: 10, noNaN: true })),
          {
            maxLength: 200,
          },
        ),
        async (values) => {
          const ours = new Registry()
          const theirs = new Registry()
          const fast = fastPlainHistogram('rows', 'help', buckets)
          ours.registerMetric(fast.metric)
          const reference = new Histogram({
            name: 'rows',
            help: 'help',
            buckets,
            registers: [theirs],
          })
          for (const value of values) {
            fast.observe(value)
            reference.observe(value)
          }
          assert.deepEqual(await series(ours), await series(theirs))
        },
      ),
      { numRuns: 100, seed: 16 },
    )
  })

  test('a fastCounter’s zeroed series reads as prom-client’s inc by 0, before and after counting', async () => {
    const ours = new Registry()
    const theirs = new Registry()
    const fast = fastCounter('c_total', 'help', ['outcome'])
    ours.registerMetric(fast.metric)
    const reference = new Counter({
      name: 'c_total',
      help: 'help',
      labelNames: ['outcome'],
      registers: [theirs],
    })
    for (const outcome of ['created', 'retry', 'conflict']) {
      fast.zero(outcome)
      reference.inc({ outcome }, 0)
    }
    assert.deepEqual(await series(ours), await series(theirs))
    for (const outcome of ['created', 'created', 'conflict', 'unavailable']) {
      fast.inc(outcome)
      reference.inc({ outcome })
    }
    fast.zero('created')
    assert.deepEqual(await series(ours), await series(theirs))
    assert.ok((await series(ours)).includes('counter c_total{outcome=retry} 0'))
  })
})
