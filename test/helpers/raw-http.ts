import { connect, type Socket } from 'node:net'

/** A response read off a raw socket. */
export type RawResponse = {
  status: number
  headers: Record<string, string>
  body: string
  /** Milliseconds from the first byte sent to the end of the connection. */
  elapsedMs: number
}

/** Opens a socket to `base` (an http URL). */
export function openSocket(base: string): Promise<Socket> {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => resolve(socket))
    socket.once('error', reject)
  })
}

/** Reads everything until the server closes the connection, and parses one response. */
export function readUntilClosed(socket: Socket, started = performance.now()): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    socket.on('data', (c: Buffer) => chunks.push(c))
    socket.on('error', (err: NodeJS.ErrnoException) => {
      // A reset after the response was written still leaves a readable response.
      if (chunks.length === 0) reject(err)
    })
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      const [head = '', ...rest] = text.split('\r\n\r\n')
      resolve({
        ...parseHead(head),
        body: rest.join('\r\n\r\n'),
        elapsedMs: performance.now() - started,
      })
    })
  })
}

/** The status and the header fields (names in lower case) of a response's head. */
function parseHead(head: string): Pick<RawResponse, 'status' | 'headers'> {
  const [statusLine = '', ...lines] = head.split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const i = line.indexOf(':')
    if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim()
  }
  return { status: Number(statusLine.split(' ')[1] ?? 0), headers }
}

/**
 * Sends one request on a kept-alive `socket` and reads its whole answer (by Content-Length),
 * leaving the connection open; rejects if the server closes it first.
 */
export function exchange(socket: Socket, bytes: string): Promise<RawResponse> {
  const started = performance.now()
  return new Promise((resolve, reject) => {
    let got = Buffer.alloc(0)
    const onData = (chunk: Buffer) => {
      got = Buffer.concat([got, chunk])
      const end = got.indexOf('\r\n\r\n')
      if (end < 0) return
      const head = parseHead(got.subarray(0, end).toString('latin1'))
      const length = Number(head.headers['content-length'] ?? 0)
      if (got.length < end + 4 + length) return
      socket.off('data', onData)
      socket.off('close', onClose)
      resolve({
        ...head,
        body: got.subarray(end + 4, end + 4 + length).toString('utf8'),
        elapsedMs: performance.now() - started,
      })
    }
    const onClose = () => reject(new Error(`the connection closed; read: ${got.toString()}`))
    socket.on('data', onData)
    socket.once('close', onClose)
    socket.write(bytes)
  })
}

/** The bytes of `POST /plants` with the JSON `body`, after `headers` (lines each ending in CRLF). */
export function createRequest(body: string, headers: string): string {
  return `POST /plants HTTP/1.1\r\nHost: x\r\n${headers}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
}

/** Sends `bytes` as they are (the request must ask for `Connection: close`) and reads the answer. */
export async function rawRequest(base: string, bytes: string | Uint8Array): Promise<RawResponse> {
  const socket = await openSocket(base)
  const started = performance.now()
  const response = readUntilClosed(socket, started)
  socket.write(bytes)
  return response
}

/** Every status line the server at `base` wrote on a connection sent `bytes`, until it closed it. */
export async function statusLinesOf(base: string, bytes: string): Promise<number[]> {
  const socket = await openSocket(base)
  socket.on('error', () => {})
  const chunks: Buffer[] = []
  socket.on('data', (c: Buffer) => chunks.push(c))
  const closed = new Promise((r) => socket.once('close', r))
  socket.write(bytes)
  // A connection that stays open after its answers is ended by the client.
  const timer = setTimeout(() => socket.end(), 3000)
  await closed
  clearTimeout(timer)
  // An answer's status line follows the previous body directly, with no line break before it.
  return [
    ...Buffer.concat(chunks)
      .toString('latin1')
      .matchAll(/HTTP\/1\.1 (\d{3}) /g),
  ].map((m) => Number(m[1]))
}
