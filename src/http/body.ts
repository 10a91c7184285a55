import type { IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { limits } from '../limits.ts'
import { type Failure, failure } from './errors.ts'

const jsonType = /^application\/json[ \t]*(?:;[ \t]*charset[ \t]*=[ \t]*(?:utf-8|"utf-8")[ \t]*)?$/i

/** Checks `Content-Type` (JSON, optionally `charset=utf-8`) and `Content-Encoding` (identity). */
export function checkContentHeaders(headers: IncomingHttpHeaders): Failure | undefined {
  const type = headers['content-type']
  if (type === undefined || !jsonType.test(type)) {
    return failure(
      40002,
      `Content-Type must be application/json (optionally with charset=utf-8), not ${type === undefined ? 'missing' : JSON.stringify(type)}`,
    )
  }
  const encoding = headers['content-encoding']
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
    return failure(
      40002,
      `Content-Encoding ${JSON.stringify(encoding)} is not supported; send the body uncompressed`,
    )
  }
  return undefined
}

const tooLarge = () => failure(40003, `body: must be at most ${limits.bodyBytes} bytes`)
const noBody = () => failure(40001, 'body: required; send a NewPlant JSON object')

/**
 * Reads the body, up to `limits.bodyBytes`. A declared `Content-Length` over the limit is refused
 * without reading; a chunked body is cut off as soon as it passes the limit.
 */
export function readBody(
  req: IncomingMessage,
  sendContinue?: () => void,
): Promise<Buffer | Failure> {
  const declared = req.headers['content-length']
  if (declared !== undefined && Number(declared) > limits.bodyBytes)
    return Promise.resolve(tooLarge())
  // The client waits for this before it sends a body it announced with Expect: 100-continue.
  sendContinue?.()
  // This runs inside the request event, which Node's parser raises at the end of the headers,
  // before it reads on. After a microtask it has pushed the body that came with them into `req`
  // (not yet its end): a usual create, whole in one read, is taken from there at once instead of
  // through the stream's events (BENCHMARKS.md, "A body that came with its headers").
  return Promise.resolve().then(() =>
    req.readableFlowing === null &&
    (req.complete || (declared !== undefined && req.readableLength === Number(declared)))
      ? bufferedBody(req)
      : streamedBody(req),
  )
}

// A request whose whole body was taken before Node's parser marked it complete.
const wholeBodyTaken = Symbol('plant-store whole body taken')
type Taken = IncomingMessage & { [wholeBodyTaken]?: true }

/**
 * Whether `req` has bytes of its body not yet read, which a response must close the connection
 * on rather than read them: not complete, and its body not taken whole from the buffer before
 * the parser said so (an answer made at once, e.g. a 400, comes before that).
 */
export function bodyUnread(req: IncomingMessage): boolean {
  return !req.complete && (req as Taken)[wholeBodyTaken] !== true
}

// What Node's HTTP server keeps on a connection's socket: its parser, and the request it parses.
type ParsedSocket = { parser?: { incoming?: unknown } | null }

/**
 * After the answer: frees a request whose body was taken whole from the buffer. Node's parser
 * holds a connection's request (`parser.incoming`) until the request's stream has ended, and a
 * stream whose body was taken at once is never read to its end: the request (about 1 kB with
 * its headers) lived until the connection's next one, and hundreds of kept-alive connections'
 * last requests were a third of a megabyte that each young-generation collection copied
 * (BENCHMARKS.md, "A connection's last request"). Letting the stream end instead (`resume()`)
 * costs each request 13 % more CPU at saturation in Node's stream events; dropping the parser's
 * reference costs nothing. Only once the parser has finished the message (`complete`), and only
 * where Node has that parser (not Deno's `node:http`): test/request-freed.test.ts.
 */
export function releaseTakenRequest(req: IncomingMessage): void {
  if ((req as Taken)[wholeBodyTaken] !== true || !req.complete) return
  const parser = (req.socket as unknown as ParsedSocket | null)?.parser
  if (parser?.incoming === req) parser.incoming = null
}

/** The body of a request whose whole body has been read: what `req` holds. */
function bufferedBody(req: IncomingMessage): Buffer | Failure {
  ;(req as Taken)[wholeBodyTaken] = true
  const body: Buffer | null = req.read()
  if (body === null || body.length === 0) return noBody()
  return body.length > limits.bodyBytes ? tooLarge() : body
}

/** The body as it arrives, cut off as soon as it passes the limit. */
function streamedBody(req: IncomingMessage): Promise<Buffer | Failure> {
  // Inline callbacks, not named ones: tsx keeps function names, which costs a defineProperty
  // for each named closure made, and these are made for every request.
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let size = 0
    let done = false
    req.on('data', (chunk: Buffer) => {
      if (done) return
      size += chunk.length
      if (size > limits.bodyBytes) {
        done = true
        req.pause()
        resolve(tooLarge())
        return
      }
      chunks.push(chunk)
    })
    req.on('end', () => {
      if (done) return
      done = true
      resolve(size === 0 ? noBody() : Buffer.concat(chunks, size))
    })
    req.on('close', () => {
      if (done) return
      done = true
      resolve(failure(40001, 'body: the request ended before the body was complete'))
    })
  })
}
