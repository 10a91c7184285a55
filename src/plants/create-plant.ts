import type { IncomingMessage } from 'node:http'
import { authenticate } from '../auth/authenticate.ts'
import type { TokenCache } from '../auth/token-cache.ts'
import { DatabaseUnavailable } from '../db/unavailable.ts'
import { checkContentHeaders, readBody } from '../http/body.ts'
import type { Failure } from '../http/errors.ts'
import { type Handler, type RequestContext, reply } from '../http/types.ts'
import type { CreateOutcomeLabel } from '../metrics/metrics.ts'
import { isFailure } from '../outcome.ts'
import { parseJsonBody } from './parse-json.ts'
import type { PlantStore } from './repository.ts'
import { type NewPlant, validateNewPlant } from './schema.ts'

/** Dependencies of `POST /plants`. */
export type CreatePlantDeps = {
  readonly tokens: TokenCache
  readonly store: PlantStore
  /** How long a request waits for the database before it is answered 503. */
  readonly databaseDeadlineMs: number
  /** Hears how each create with valid credentials ended (for the metrics). */
  readonly createAnswered?: (outcome: CreateOutcomeLabel) => void
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
 * `POST /plants`, checked in the contract's order: credentials, content type, size, JSON,
 * NewPlant, store. Nothing of the body is read before the credentials are valid.
 */
export function createPlantHandler({
  tokens,
  store,
  databaseDeadlineMs,
  createAnswered = () => {},
}: CreatePlantDeps): Handler {
  return async (req, ctx) => {
    const tokenName = authenticate(req, tokens)
    if (isFailure(tokenName)) return tokenName
    ctx.tokenName = tokenName

    const plant = await readNewPlant(req, ctx.sendContinue)
    if (isFailure(plant)) {
      createAnswered('invalid')
      return plant
    }
    const outcome = await store
      .create(plant, tokenName, performance.now() + databaseDeadlineMs)
      .catch((err: unknown) => {
        if (err instanceof DatabaseUnavailable) createAnswered('unavailable')
        throw err
      })
    if (isFailure(outcome)) {
      createAnswered('conflict')
      return outcome
    }
    createAnswered(outcome.kind)
    return reply(outcome.plant)
  }
}
