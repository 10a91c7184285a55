import { authenticate } from '../auth/authenticate.ts'
import type { TokenCache } from '../auth/token-cache.ts'
import { withDeadline } from '../db/unavailable.ts'
import { failure } from '../errors.ts'
import { checkContentHeaders, readBody } from '../http/body.ts'
import { type Handler, reply } from '../http/types.ts'
import { parseJsonBody } from './parse-json.ts'
import type { PlantStore } from './repository.ts'
import { validateNewPlant } from './schema.ts'

/** Dependencies of `POST /plants`. */
export type CreatePlantDeps = {
  readonly tokens: TokenCache
  readonly store: PlantStore
  /** How long a request waits for the database before it is answered 503. */
  readonly databaseDeadlineMs: number
}

/**
 * `POST /plants`, checked in the contract's order: credentials, content type, size, JSON,
 * NewPlant, store. Nothing of the body is read before the credentials are valid.
 */
export function createPlantHandler({
  tokens,
  store,
  databaseDeadlineMs,
}: CreatePlantDeps): Handler {
  return async (req, ctx) => {
    const tokenName = authenticate(req, tokens)
    if (typeof tokenName !== 'string') return tokenName
    ctx.tokenName = tokenName

    const badHeaders = checkContentHeaders(req.headers)
    if (badHeaders) return badHeaders
    const body = await readBody(req)
    if (!(body instanceof Uint8Array)) return body
    const parsed = parseJsonBody(body)
    if ('kind' in parsed) return parsed
    const valid = validateNewPlant(parsed.value)
    if (!valid.ok) return failure(40005, valid.message)

    const outcome = await withDeadline(
      store.create(valid.plant, tokenName, performance.now() + databaseDeadlineMs),
      databaseDeadlineMs,
    )
    return outcome.kind === 'failure' ? outcome : reply(outcome.plant)
  }
}
