import cluster from 'node:cluster'
import process from 'node:process'
import { AggregatorRegistry } from 'prom-client'
import { limits } from '../limits.ts'
import { describeError } from '../log.ts'

// With WORKERS, GET /metrics on any worker answers for all of them: the worker asks the primary
// over the cluster's IPC channel, and the primary adds up every worker's registry.

/**
 * One collection at a time: callers that come while one runs share its result. A flood of
 * scrapes costs one collection, not one each.
 */
export function shared<T>(collect: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined
  return () => {
    running ??= collect().finally(() => {
      running = undefined
    })
    return running
  }
}

/** The message a worker sends for the metrics of all workers, and the primary's answer. */
export const metricsRequest = 'plant-store:metrics'

let nextMetricsRequest = 0

/**
 * In a worker: the metrics of every worker, added up by the primary (prom-client's
 * AggregatorRegistry: counters and histograms summed, gauges as each one declares).
 */
export function metricsOfAllWorkers(): Promise<string> {
  const id = nextMetricsRequest++
  return new Promise((resolve, reject) => {
    const onMessage = (message: {
      type?: unknown
      id?: unknown
      text?: string
      error?: string
    }) => {
      if (message?.type !== metricsRequest || message.id !== id) return
      done()
      if (message.text === undefined) reject(new Error(message.error ?? 'no metrics'))
      else resolve(message.text)
    }
    const timer = setTimeout(() => {
      done()
      reject(
        new Error(
          `the primary did not send the metrics within ${limits.workers.metricsAnswer / 1000} s`,
        ),
      )
    }, limits.workers.metricsAnswer)
    const done = () => {
      clearTimeout(timer)
      process.off('message', onMessage)
    }
    process.on('message', onMessage)
    process.send?.({ type: metricsRequest, id })
  })
}

/**
 * Answers each worker's request for the metrics of all workers, added up: one aggregation at a
 * time, shared by the requests that come while it runs.
 */
export function answerMetricsRequests(): void {
  const aggregator = new AggregatorRegistry()
  const aggregate = shared(() => aggregator.clusterMetrics())
  cluster.on('message', (worker, message: { type?: unknown; id?: unknown }) => {
    if (message?.type !== metricsRequest) return
    aggregate().then(
      (text) => worker.send({ type: metricsRequest, id: message.id, text }),
      (err: unknown) =>
        worker.send({ type: metricsRequest, id: message.id, error: describeError(err) }),
    )
  })
}
