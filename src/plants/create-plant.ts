import type { IncomingMessage } from 'node:http'
import { authenticate } from '../auth/authenticate.ts'
import type { TokenCache } from '../auth/token-cache.ts'
import { DatabaseUnavailable } from '../db/unavailable.ts'
import { checkContentHeaders, readBody } from '../http/body.ts'
import { type Failure, failure } from '../http/errors.ts'
import { type Handler, reply } from '../http/types.ts'
import type { CreateOutcomeLabel } from '../metrics/metrics.ts'
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
): Promise<{ kind: 'valid'; plant: NewPlant } | Failure> {
  const badHeaders = checkContentHeaders(req.headers)
  if (badHeaders) return badHeaders
  const body = await readBody(req)
  if (!(body instanceof Uint8Array)) return body
  const parsed = parseJsonBody(body)
  if ('kind' in parsed) return parsed
  const valid = validateNewPlant(parsed.value)
  return valid.ok ? { kind: 'valid', plant: valid.plant } : failure(40005, valid.message)
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
    if (typeof tokenName !== 'string') return tokenName
    ctx.tokenName = tokenName

    const read = await readNewPlant(req)
    if (read.kind === 'failure') {
      createAnswered('invalid')
      return read
    }
    const outcome = await store
      .create(read.plant, tokenName, performance.now() + databaseDeadlineMs)
      .catch((err: unknown) => {
        if (err instanceof DatabaseUnavailable) createAnswered('unavailable')
        throw err
      })
    createAnswered(outcome.kind === 'failure' ? 'conflict' : outcome.kind)
    return outcome.kind === 'failure' ? outcome : reply(outcome.plant)
  }
}
