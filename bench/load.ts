import { connect, type Socket } from 'node:net'

/** What one load phase measured. */
export type LoadResult = {
  /** 200s inside the measured window. */
  readonly ok: number
  /** Every 200, warm-up included: each must be a row in the table. */
  readonly totalOk: number
  readonly errors: number
  readonly seconds: number
  /** Latencies in milliseconds of the measured requests, unsorted. */
  readonly latencies: Float64Array
  /** Completed 200s per whole second of the measured window. */
  readonly perSecond: number[]
}

/** Options of a load phase. */
export type LoadOptions = {
  readonly base: string
  readonly token: string
  readonly connections: number
  readonly warmupSeconds: number
  readonly seconds: number
  /** First id to use; each request takes the next one. */
  readonly firstId: bigint
}

/**
 * Drives `POST /plants` with unique ids over keep-alive connections, one request in flight per
 * connection, from raw sockets so that the generator costs as little CPU as possible.
 */
export async function runLoad(o: LoadOptions): Promise<LoadResult & { nextId: bigint }> {
  const { hostname, port } = new URL(o.base)
  let nextId = o.firstId
  const head = `POST /plants HTTP/1.1\r\nHost: ${hostname}\r\nAuthorization: Bearer ${o.token}\r\nContent-Type: application/json\r\nContent-Length: `
  const started = performance.now()
  const measureFrom = started + o.warmupSeconds * 1000
  const stopAt = measureFrom + o.seconds * 1000
  const capacity = 1 << 22
  let latencies = new Float64Array(capacity)
  let count = 0
  let ok = 0
  let totalOk = 0
  let errors = 0
  const perSecond: number[] = Array.from({ length: Math.ceil(o.seconds) }, () => 0)

  const headerEnd = Buffer.from('\r\n\r\n')
  const lengthHeader = Buffer.from('content-length: ')
  function request(): Buffer {
    const body = `{"id":${nextId++},"name":"bench plant","tag":"bench"}`
    return Buffer.from(`${head}${body.length}\r\n\r\n${body}`)
  }

  function drive(socket: Socket): Promise<void> {
    return new Promise((resolve, reject) => {
      let buffer: Buffer = Buffer.alloc(0)
      let sentAt = 0
      const send = () => {
        if (performance.now() >= stopAt) {
          socket.end()
          resolve()
          return
        }
        sentAt = performance.now()
        socket.write(request())
      }
      socket.on('data', (chunk: Buffer) => {
        buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk])
        for (;;) {
          const end = buffer.indexOf(headerEnd)
          if (end === -1) return
          // The service always sends a lowercase content-length header.
          const at = buffer.indexOf(lengthHeader)
          let length = 0
          for (let i = at + lengthHeader.length; at !== -1 && i < end; i++) {
            const c = buffer[i] ?? 0
            if (c < 0x30 || c > 0x39) break
            length = length * 10 + c - 0x30
          }
          if (buffer.length < end + 4 + length) return
          const status =
            ((buffer[9] ?? 0) - 0x30) * 100 +
            ((buffer[10] ?? 0) - 0x30) * 10 +
            (buffer[11] ?? 0) -
            0x30
          buffer = buffer.subarray(end + 4 + length)
          const now = performance.now()
          if (status === 200) totalOk++
          if (now >= measureFrom && now < stopAt) {
            if (status === 200) {
              ok++
              const second = Math.floor((now - measureFrom) / 1000)
              perSecond[second] = (perSecond[second] ?? 0) + 1
            } else errors++
            if (count === latencies.length) {
              const bigger = new Float64Array(latencies.length * 2)
              bigger.set(latencies)
              latencies = bigger
            }
            latencies[count++] = now - sentAt
          } else if (status !== 200) errors++
          send()
        }
      })
      socket.on('error', reject)
      socket.on('close', () => resolve())
      send()
    })
  }

  const sockets = await Promise.all(
    Array.from(
      { length: o.connections },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect(Number(port), hostname, () => resolve(s))
          s.setNoDelay(true)
          s.once('error', reject)
        }),
    ),
  )
  await Promise.all(sockets.map(drive))
  return {
    ok,
    totalOk,
    errors,
    seconds: o.seconds,
    latencies: latencies.subarray(0, count),
    perSecond,
    nextId,
  }
}

/** The q-quantile (0..1) of the values, in their unit. */
export function quantile(values: Float64Array, q: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = Float64Array.from(values).sort()
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}
