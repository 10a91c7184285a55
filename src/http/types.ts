import type { IncomingMessage } from 'node:http'
import type { Failure } from '../errors.ts'

/** A successful answer: its status and JSON body. */
export type Reply = {
  readonly kind: 'reply'
  readonly status: number
  readonly body: unknown
}

/** What a handler returns: a reply or an expected failure of the error table. */
export type Outcome = Reply | Failure

/** Per-request facts that end up in the request's log line. */
export type RequestContext = {
  readonly requestId: string
  tokenName: string | undefined
}

/** A route handler; it throws only for bugs and infrastructure faults. */
export type Handler = (req: IncomingMessage, ctx: RequestContext) => Outcome | Promise<Outcome>

/** Builds a 200-class reply. */
export function reply(body: unknown, status = 200): Reply {
  return { kind: 'reply', status, body }
}
