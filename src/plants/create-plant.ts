import type { IncomingMessage } from 'node:http'
import { authenticate, expiryNotice } from '../auth/authenticate.ts'
import type { TokenCache, TokenEntry } from '../auth/token-cache.ts'
import { checkContentHeaders, readBody } from '../http/body.ts'
import { answerOf, type Failure, failure, tooMany } from '../http/errors.ts'
import type { Buckets } from '../http/rate-limit.ts'
import { type Handler, type Outcome, type RequestContext, reply } from '../http/types.ts'
import type { CreateOutcomeLabel } from '../metrics/metrics.ts'
import { type Fault, isFailure } from '../outcome.ts'
import type { CreateOutcome } from './batch-sql.ts'
import { parseJsonBody } from './parse-json.ts'
import { type NewPlant, validateNewPlant } from './schema.ts'
import type { PlantStore } from './store.ts'

/** Dependencies of `POST /plants`. */
export type CreatePlantDeps = {
  readonly tokens: TokenCache
  readonly store: PlantStore
  /**
   * How long after its arrival a request waits for the database (the store holding its create
   * through a gap) before it is answered 503.
   */
  readonly databaseDeadlineMs: number
  /** Hears how each create with valid credentials ended (for the metrics). */
  readonly createAnswered?: (outcome: CreateOutcomeLabel) => void
  /** Failed authentications allowed per client address; none counted when undefined. */
  readonly authFailures?: Buckets | undefined
  /** Requests allowed per token (RATE_LIMIT); no limit when undefined. */
  readonly tokenRate?: Buckets | undefined
  /** Hears each use of a valid token, at the time it was judged (to record its last use). */
  readonly tokenUsed?: ((token: TokenEntry, now: number) => void) | undefined
}

/** The content type, size, JSON and NewPlant checks, in the contract's order. */
async function readNewPlant(
  req: IncomingMessage,
  sendContinue: RequestContext['sendContinue'],
): Promise<NewPlant | Failure> {
  const badHeaders = checkContentHeaders(req.headers)
  if (badHeaders) return badHeaders
  const body = await readBody(req, sendContinue)
  if (isFailure(body)) return body
  const parsed = parseJsonBody(body)
  if (isFailure(parsed)) return parsed
  return validateNewPlant(parsed.value)
}

/**
 * The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers): the token's policy (quota
 * `q` per window `w` seconds) and what remains of it (`r`, full again in `t` seconds).
 */
function rateLimitHeaders(rate: Buckets, tokenName: string): Record<string, string> {
  return {
    'ratelimit-policy': `"token";q=${rate.capacity};w=${rate.windowSeconds}`,
    ratelimit: `"token";r=${rate.remaining(tokenName)};t=${rate.resetIn(tokenName)}`,
  }
}

/**
 * `POST /plants`, checked in the contract's order: credentials, content type, size, JSON,
 * NewPlant, store. Nothing of the body is read before the credentials are valid.
 */
export function createPlantHandler({
  tokens,
  store,
  databaseDeadlineMs,
  createAnswered = () => {},
  authFailures,
  tokenRate,
  tokenUsed = () => {},
}: CreatePlantDeps): Handler {
  return async (req, ctx) => {
    const now = Date.now()
    const token = authenticate(req, tokens, now)
    if (isFailure(token)) {
      // Only failures count: a valid token is never refused for someone else's.
      const client = ctx.client ?? ''
      if (authFailures === undefined || authFailures.take(client)) return token
      const wait = authFailures.retryAfter(client)
      return tooMany(
        42901,
        `too many failed authentications from this address; try again in ${wait} s`,
        wait,
      )
    }
    tokenUsed(token, now)
    const tokenName = token.name
    let headers = expiryNotice(token, now)
    if (tokenRate !== undefined) {
      const allowed = tokenRate.take(tokenName)
      headers = Object.assign({}, headers, rateLimitHeaders(tokenRate, tokenName))
      if (!allowed) {
        const wait = tokenRate.retryAfter(tokenName)
        return {
          ...tooMany(42902, `this token's rate limit is reached; try again in ${wait} s`, wait),
          headers,
          tokenName,
        }
      }
    }

    const ended = await readAndStore(req, ctx, store, tokenName, databaseDeadlineMs)
    // A fault is thrown here, for the server's 500: it is no outcome of a create to count.
    const answer = answerOfCreate(ended)
    if (ended.kind !== 'fault') createAnswered(outcomeLabel(ended))
    // Object.assign, not an object spread: on Node 20 a spread made per request survived
    // scavenges and was promoted (BENCHMARKS.md, "What survives a scavenge").
    return Object.assign({}, answer, headers && { headers }, { tokenName })
  }
}

/** The answer to how a create ended: the plant, its refusal, or the database's outcome. */
function answerOfCreate(ended: CreateOutcome | Failure): Outcome {
  switch (ended.kind) {
    case 'created':
    case 'retry':
      return reply(ended.plant)
    case 'conflict':
      return failure(
        40009,
        `id ${ended.id}: a plant with this id exists with a different name or tag`,
      )
    case 'unavailable':
    case 'fault':
      return answerOf(ended)
    default:
      return ended
  }
}

/** The body read and checked, then stored: how the create ended (never a throw of the store). */
async function readAndStore(
  req: IncomingMessage,
  { sendContinue, receivedAt, trace }: RequestContext,
  store: PlantStore,
  tokenName: string,
  deadlineMs: number,
): Promise<CreateOutcome | Failure> {
  const plant = await readNewPlant(req, sendContinue)
  if (isFailure(plant)) return plant
  return store.create(plant, tokenName, receivedAt + deadlineMs, trace)
}

/** What a create that got past authentication came to, for the metrics (a fault is not one). */
function outcomeLabel(ended: Exclude<CreateOutcome, Fault> | Failure): CreateOutcomeLabel {
  return ended.kind === 'failure' ? 'invalid' : ended.kind
}
