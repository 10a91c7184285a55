import { Agent, request } from 'node:http'
import { Agent as TlsAgent, request as tlsRequest } from 'node:https'
import { sleep, within } from './wait.ts'

/** A create the service answered with 200, and what was sent for it. */
export type Acknowledged = { id: string; name: string; tag: string | null }

/** One create: when it was sent and answered (performance.now()), and how. */
export type Answer = {
  readonly sentAt: number
  readonly answeredAt: number
  readonly status: number
  readonly retryAfter: string | null
}

/** What a stream of creates saw. */
export type Drive = {
  /** Every create, in the order answered. */
  readonly answers: Answer[]
  readonly acknowledged: Acknowledged[]
  /** Creates answered 503: their outcome is unknown, and retrying them must be safe. */
  readonly unavailable: Acknowledged[]
  /** performance.now() of every 200, in order. */
  readonly acknowledgedAt: number[]
  /** performance.now() of every 503, in order. */
  readonly unavailableAt: number[]
  /** Statuses seen, by status (0: the request failed without a response). */
  readonly statuses: Map<number, number>
  /** The slowest answer, in ms. */
  slowestMs: number
  /** Stops the loops and resolves when they have ended. */
  readonly stop: () => Promise<void>
}

let sequence = 0

/** What a kept-alive client's POST was answered: the status, Retry-After, and the body's text. */
export type Posted = { status: number; retryAfter: string | null; text: string }

/**
 * POSTs to `url` through node:http (or node:https) on at most `sockets` kept-alive connections,
 * as the service's own bench drives it. (fetch spent 0.8 ms of the test's CPU on each create,
 * several times what the service spent on it, and took that CPU from every other test of the
 * suite running beside.) A connection closed before the whole answer came rejects, as fetch
 * would.
 */
export function keptAliveClient(url: string, sockets: number) {
  const target = new URL(url)
  const tls = target.protocol === 'https:'
  const agent = tls
    ? new TlsAgent({ keepAlive: true, maxSockets: sockets })
    : new Agent({ keepAlive: true, maxSockets: sockets })
  const post = (body: string | Buffer, headers: Record<string, string>, signal?: AbortSignal) =>
    new Promise<Posted>((resolve, reject) => {
      const req = (tls ? tlsRequest : request)(
        target,
        {
          method: 'POST',
          agent,
          headers: { ...headers, 'content-length': Buffer.byteLength(body) },
          ...(signal && { signal }),
        },
        (res) => {
          const retryAfter = res.headers['retry-after'] ?? null
          const chunks: Buffer[] = []
          res.on('error', reject)
          res.on('data', (c: Buffer) => chunks.push(c))
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              retryAfter,
              text: Buffer.concat(chunks).toString(),
            }),
          )
          res.on('close', () => res.complete || reject(new Error('the answer was cut off')))
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  return { post, close: () => agent.destroy() }
}

/** A client of `keptAliveClient`. */
export type KeptAliveClient = ReturnType<typeof keptAliveClient>

/**
 * Sends creates with unique ids from `concurrency` loops until stopped, recording every 200 with
 * the values sent. A request that fails without a response ends its loop only if `untilError`.
 */
export function driveCreates(
  base: string,
  token: string,
  { concurrency = 16, untilError = false, pauseMs = 3 } = {},
): Drive {
  let running = true
  const drive: Drive = {
    answers: [],
    acknowledged: [],
    unavailable: [],
    acknowledgedAt: [],
    unavailableAt: [],
    statuses: new Map(),
    slowestMs: 0,
    stop: async () => {
      running = false
      await loops
      client.close()
    },
  }
  const prefix = BigInt(Date.now()) * 1_000_000n + BigInt(process.pid % 1000) * 1000n
  const client = keptAliveClient(`${base}/plants`, concurrency)
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
  const post = (body: string) => client.post(body, headers)
  async function loop(): Promise<void> {
    while (running) {
      const id = String(prefix + BigInt(++sequence) * 1000n)
      const plant = { id, name: `durable ${id}`, tag: sequence % 2 ? 'odd' : null }
      const body = bodyOf(plant)
      const started = performance.now()
      let status = 0
      let retryAfter: string | null = null
      try {
        ;({ status, retryAfter } = await post(body))
      } catch {
        status = 0
      }
      const answeredAt = performance.now()
      drive.answers.push({ sentAt: started, answeredAt, status, retryAfter })
      drive.slowestMs = Math.max(drive.slowestMs, answeredAt - started)
      drive.statuses.set(status, (drive.statuses.get(status) ?? 0) + 1)
      if (status === 200) {
        drive.acknowledged.push(plant)
        drive.acknowledgedAt.push(performance.now())
      }
      if (status === 503) {
        drive.unavailable.push(plant)
        drive.unavailableAt.push(performance.now())
      }
      if (status === 0 && untilError) return
      if (pauseMs > 0) await sleep(pauseMs)
    }
  }
  const loops = Promise.all(Array.from({ length: concurrency }, loop)).then(() => {})
  return drive
}

/** The body `driveCreates` sends for a create, to send it again. */
export function bodyOf(plant: Acknowledged): string {
  return `{"id":${plant.id},"name":${JSON.stringify(plant.name)}${plant.tag ? `,"tag":"${plant.tag}"` : ''}}`
}

/** The acknowledged creates that are not in `plants` exactly as sent. */
export async function lostAcknowledgements(
  sql: import('postgres').Sql,
  acknowledged: readonly Acknowledged[],
): Promise<Acknowledged[]> {
  const rows = await sql<Acknowledged[]>`
    select id::text, name, tag from plants where id = any(${acknowledged.map((a) => a.id)}::int8[])`
  const stored = new Map(rows.map((r) => [r.id, r]))
  return acknowledged.filter((a) => {
    const row = stored.get(a.id)
    return row === undefined || row.name !== a.name || row.tag !== a.tag
  })
}

/**
 * Resolves once `drive` has had `creates` creates acknowledged (a load under way, its
 * connections open and its statements warm), before a test brings its fault; rejects after `ms`.
 */
export async function underWay(drive: Drive, creates = 200, ms = 15_000): Promise<void> {
  await within(ms, () => drive.acknowledged.length >= creates)
}

/**
 * Resolves once `creates` creates sent after `at` (performance.now(), e.g. a promotion) have been
 * acknowledged, the service past its fault, or after `ms` without (the checks that follow say
 * what went wrong, better than a time-out would).
 */
export async function pastTheFault(
  drive: Drive,
  at: number,
  creates = 200,
  ms = 10_000,
): Promise<void> {
  await within(
    ms,
    () => drive.answers.filter((a) => a.sentAt > at && a.status === 200).length >= creates,
  ).catch(() => undefined)
}
