import { toJsonSchema } from '@valibot/to-json-schema'
import * as v from 'valibot'
import { type ErrorCode, errorTable } from '../http/errors.ts'
import { limits } from '../limits.ts'
import { NewPlant, Plant } from '../plants/schema.ts'

const codes = Object.keys(errorTable).map(Number) as ErrorCode[]

/** The Error body of every failure, as a Valibot schema so that it is documented like the rest. */
export const ErrorBody = v.pipe(
  v.strictObject({
    error: v.pipe(
      v.picklist(codes),
      v.metadata({ type: 'integer', format: 'int32' }),
      v.description('Stable numeric error code; its first three digits are the HTTP status'),
    ),
    message: v.pipe(
      v.string(),
      v.description('What went wrong, for a person; never a stack trace, SQL or the token'),
    ),
  }),
  v.description('The body of every error response'),
)

function schemaOf(schema: v.GenericSchema): Record<string, unknown> {
  const json = toJsonSchema(schema, {
    target: 'draft-2020-12',
    errorMode: 'throw',
    // What Valibot cannot express in JSON Schema (a bigint, a check) the schemas state in a
    // metadata action beside it, which the converter copies in.
    overrideSchema: ({ valibotSchema, jsonSchema }) =>
      valibotSchema.type === 'bigint' ? jsonSchema : undefined,
    overrideAction: ({ valibotAction, jsonSchema }) => {
      if (valibotAction.type === 'check') return jsonSchema
      // The int64 bounds are implied by format: int64; as JSON numbers they would round.
      if (valibotAction.type === 'min_value' || valibotAction.type === 'max_value')
        return jsonSchema
      return undefined
    },
  }) as Record<string, unknown>
  delete json.$schema
  return json
}

function codesOf(status: number): ErrorCode[] {
  return codes.filter((code) => errorTable[code].status === status)
}

function codeTable(list: readonly ErrorCode[]): string {
  return [
    '| error | when |',
    '|---|---|',
    ...list.map((c) => `| ${c} | ${errorTable[c].when} |`),
  ].join('\n')
}

function errorResponse(status: number, summary: string, headers: Record<string, unknown> = {}) {
  const list = codesOf(status)
  return {
    description: `${summary}\n\n${codeTable(list)}`,
    headers: { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' }, ...headers },
    content: {
      'application/json': {
        // allOf, not $ref with sibling keywords: OpenAPI 3.1 allows those, but several tools
        // (Swagger UI, RapiDoc, validating proxies) then drop the $ref or misread the body.
        schema: {
          allOf: [
            { $ref: '#/components/schemas/Error' },
            { type: 'object', properties: { error: { enum: list } } },
          ],
        },
        examples: Object.fromEntries(
          list.map((c) => [String(c), { value: { error: c, message: errorTable[c].when } }]),
        ),
      },
    },
  }
}

// An answer of POST /plants to a valid token, which may say that the token expires soon.
function withTokenExpires(response: { headers: Record<string, unknown> }) {
  return {
    ...response,
    headers: {
      ...response.headers,
      'Token-Expires': { $ref: '#/components/headers/Token-Expires' },
    },
  }
}

// A 200 that is not JSON: a page or the metrics text.
function textResponse(description: string, mediaType: string) {
  return {
    description,
    headers: { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' } },
    content: { [mediaType]: { schema: { type: 'string' } } },
  }
}

function okResponse(description: string, schema: Record<string, unknown>, example?: unknown) {
  return {
    description,
    headers: { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' } },
    content: { 'application/json': { schema, ...(example === undefined ? {} : { example }) } },
  }
}

const statusSchema = (value: string) => ({
  type: 'object',
  required: ['status'],
  additionalProperties: false,
  properties: { status: { const: value } },
})

function probe(
  operationId: string,
  tag: string,
  summary: string,
  description: string,
  ok: Record<string, unknown>,
  extra = {},
) {
  return {
    get: {
      operationId,
      tags: [tag],
      summary,
      description: `${description} No credentials needed. HEAD is answered like GET, without a body.`,
      security: [],
      responses: { '200': ok, ...extra },
    },
  }
}

// Example ids stay below 2^53: browsers and most tools read this document with JSON.parse.
const newPlantExample = { id: 1001, name: 'Monstera deliciosa', tag: 'tropical' }
const plantExample = { name: 'Monstera deliciosa', tag: 'tropical' }

/** The responses every operation may share: 400, 401 and 503 with their codes and headers. */
function errorResponses() {
  const unauthorised = errorResponse(401, 'No valid credentials.', {
    'WWW-Authenticate': {
      description:
        '`Bearer realm="plants"`, with `error="invalid_token"` for 40102 (unknown or revoked token), and `error="invalid_token", error_description="the token expired"` for 40103',
      schema: { type: 'string' },
    },
  })
  const badRequest = errorResponse(400, 'The request is refused; nothing is stored.', {
    'WWW-Authenticate': {
      description: 'Only with 40010: `Bearer realm="plants", error="invalid_request"`',
      schema: { type: 'string' },
    },
  })
  const unavailable = errorResponse(503, 'The database is unreachable or did not answer in time.', {
    'Retry-After': {
      description: `Seconds to wait before trying again (${limits.retryAfterSeconds})`,
      schema: { type: 'integer' },
    },
  })
  const tooManyRequests = errorResponse(
    429,
    `Slow down. 42901: this client address made more than the allowed failed authentications (by default ${limits.authFailures.allowed} per ${limits.authFailures.windowSeconds} s; \`AUTH_FAILURE_LIMIT\`); a valid token is never refused for it. 42902: this token made more requests than its rate limit (\`RATE_LIMIT\` per second; off by default). Limits are kept per instance (with \`WORKERS\`, per worker).`,
    {
      'Retry-After': {
        description: 'Seconds to wait before trying again',
        schema: { type: 'integer' },
      },
      RateLimit: {
        description:
          'With a token rate limit, on every answer to the token (draft-ietf-httpapi-ratelimit-headers): `"token";r=<remaining>;t=<seconds until full>`',
        schema: { type: 'string' },
      },
      'RateLimit-Policy': {
        description: 'With a token rate limit: `"token";q=<requests>;w=1`',
        schema: { type: 'string' },
      },
    },
  )
  return { badRequest, unauthorised, tooManyRequests, unavailable }
}

/** The document's introduction: what every path shares, and the table of error codes. */
function info() {
  return {
    title: 'Plant store',
    version: '1.0.0',
    summary: 'A sample plant store interface: create plants.',
    contact: { name: 'The plant store team' },
    description: [
      'Clients create plant records with `POST /plants`; the records live in PostgreSQL.',
      '',
      `Every response carries \`X-Request-Id\`: the client's own value when it is 1 to ${limits.http.requestIdLength} characters of \`[A-Za-z0-9._-]\`, otherwise a generated one. The same id is in the log line of the request.`,
      '',
      'Every path answers `404` / 40401 for an unknown path (`/plants/` is another path than `/plants`) and `405` / 40501, with an `Allow` header, for a method the path does not have. A query string is ignored.',
      '',
      `Time limits: request headers ${limits.http.headers / 1000} s, whole request ${limits.http.request / 1000} s, idle keep-alive ${limits.http.keepAlive / 1000} s. Requests cut off by these limits get \`408\` with no body (and, like a request whose framing the parser refuses with \`400\`, an \`X-Request-Id\`), and the connection closes. A connection on which no byte moves either way for ${limits.http.stalled / 1000} s (an answer the client does not read) is closed.`,
      '',
      `Connections: the requests of one connection run one at a time, in order; up to ${limits.http.pipelined} pipelined requests wait behind the running one, and one more makes its answer close the connection. Requests pipelined behind an answer that closes the connection are never run (RFC 9112 §9.6): send them again on a new connection. \`Expect: 100-continue\` gets \`100 Continue\` only when the path, method, credentials, content type and declared size allow the request to go on; otherwise the final answer. The service holds a limited number of open connections (\`MAX_CONNECTIONS\`); beyond it a new connection is closed at once.`,
      '',
      '## Error codes',
      '',
      codeTable(codes),
    ].join('\n'),
  }
}

// The first server is relative: where the document was fetched from, so a page or client that
// reads it from a running service talks to that service. The second keeps a variable for clients
// generated from a saved copy of the document.
const servers = [
  { url: '/', description: 'The service this document was fetched from' },
  {
    url: '{base_url}',
    description: 'A service at another address',
    variables: {
      base_url: { default: 'http://127.0.0.1:8080', description: 'Where the service runs' },
    },
  },
]

const tags = [
  { name: 'plants', description: 'Plant records' },
  { name: 'operations', description: 'Probes for load balancers and orchestrators' },
  { name: 'documentation', description: 'This document and its reference page' },
]

/** `POST /plants`. */
function createPlantOperation({
  badRequest,
  unauthorised,
  tooManyRequests,
  unavailable,
}: ErrorResponses) {
  return {
    operationId: 'createPlant',
    tags: ['plants'],
    summary: 'Create a plant',
    description: [
      'Creates a new plant in the store. The 200 is sent only after the row is committed.',
      '',
      '**Idempotent retries.** The id is chosen by the client and is the idempotency key: if a plant with that id exists with the same name and tag (both without a tag counts as the same), the request is a retry and is answered 200 with that plant, changing nothing. If it exists with a different name or tag, the answer is 400 / 40009. Of concurrent creates of one id with different contents exactly one gets 200; all others get 40009.',
      '',
      `**Limits.** Body at most ${limits.bodyBytes} bytes (${limits.bodyBytes / 1024} KiB): a larger declared \`Content-Length\` is refused without reading the body, a chunked body is cut off as soon as it passes the limit. \`Content-Type: application/json\`, optionally with \`charset=utf-8\`; no \`Content-Encoding\` other than \`identity\`.`,
      '',
      '**Order of checks.** path, method, credentials, content type, size, JSON, NewPlant, store. A request without valid credentials never has its body read.',
      '',
      `**Token lifetime.** Tokens expire (${limits.tokens.lifetime / 86_400_000} days after they are made unless the operator chose otherwise); an expired token is refused with 401 / 40103. Every answer to a token that expires within ${limits.tokens.warnBefore / 86_400_000} days carries \`Token-Expires\`, the time it stops working: ask the operator for its successor (\`npm run token -- rotate NAME\`, during whose grace both work).`,
    ].join('\n'),
    parameters: [{ $ref: '#/components/parameters/X-Request-Id' }],
    requestBody: {
      required: true,
      description: `A NewPlant object, at most ${limits.bodyBytes} bytes of UTF-8 JSON.`,
      content: {
        'application/json': {
          schema: { $ref: '#/components/schemas/NewPlant' },
          example: newPlantExample,
        },
      },
    },
    responses: {
      '200': withTokenExpires(
        okResponse(
          'The plant response: the stored plant (also for an idempotent retry)',
          { $ref: '#/components/schemas/Plant' },
          plantExample,
        ),
      ),
      '400': withTokenExpires(badRequest),
      '401': unauthorised,
      '429': withTokenExpires(tooManyRequests),
      '500': withTokenExpires(
        errorResponse(500, 'An unexpected fault; the message quotes the request id.'),
      ),
      '503': withTokenExpires(unavailable),
    },
  }
}

/** The probes and documents: no credentials, GET and HEAD. */
function probePaths({ unavailable }: ErrorResponses) {
  return {
    '/healthz': probe(
      'getLiveness',
      'operations',
      'Liveness',
      'Answers 200 while the process runs; the database is not consulted.',
      okResponse('The process runs', statusSchema('ok')),
    ),
    '/readyz': probe(
      'getReadiness',
      'operations',
      'Readiness',
      `Answers 200 when creates can be stored: a probe through the creates' own statement slots and connections gets an answer within ${limits.database.readiness / 1000} s from a writable server whose schema is current (a transaction of its own, so it also waits for a synchronous standby as a create does). Otherwise 503 (50301), whose message says why; also from the moment the instance is told to stop (SIGTERM), while it goes on serving for its drain delay, so that a balancer moves on first. For load balancers; use /healthz for liveness.`,
      okResponse('Ready to serve', statusSchema('ready')),
      { '503': unavailable },
    ),
    '/metrics': probe(
      'getMetrics',
      'operations',
      'Prometheus metrics',
      'Counters, gauges and histograms of this instance in the Prometheus text exposition format: requests by route and status, creates by outcome, the create queue, batch sizes, database unavailability, the token cache, and the runtime. 404 when the service runs with `METRICS=off`.',
      textResponse('The metrics', 'text/plain'),
    ),
    '/openapi.json': probe(
      'getOpenApiDocument',
      'documentation',
      'This document',
      'The OpenAPI 3.1 document of the service.',
      okResponse('The OpenAPI document', { type: 'object' }),
    ),
    '/docs': probe(
      'getReferencePage',
      'documentation',
      'The API reference page',
      'This document rendered by Swagger UI, where a token can be entered and requests tried. Everything the page loads comes from the service itself.',
      textResponse('The HTML page', 'text/html'),
    ),
  }
}

/** Security scheme, schemas (from the Valibot schemas), the X-Request-Id parameter and header. */
function components() {
  return {
    securitySchemes: {
      bearerAuth: {
        type: 'http',
        scheme: 'bearer',
        description:
          'RFC 6750 bearer token (`pst_`, 43 base62 characters and a 6-character base62 CRC32 of what precedes it; tokens issued before the checksum are `pst_` and 43 base64url characters), issued with `npm run token -- create NAME`. A token of the checksummed shape whose checksum does not match is refused (401, 40102) without a look-up. The scheme name is case-insensitive; one space separates it from the token.',
      },
    },
    schemas: {
      NewPlant: { ...schemaOf(NewPlant), examples: [newPlantExample] },
      Plant: { ...schemaOf(Plant), examples: [plantExample] },
      Error: schemaOf(ErrorBody),
    },
    parameters: {
      'X-Request-Id': {
        name: 'X-Request-Id',
        in: 'header',
        required: false,
        description: 'Your id for this request, echoed back and logged; otherwise one is generated',
        schema: { type: 'string', pattern: `^[A-Za-z0-9._-]{1,${limits.http.requestIdLength}}$` },
      },
    },
    headers: {
      'X-Request-Id': {
        description: 'The id of this request, as in its log line',
        schema: { type: 'string', pattern: `^[A-Za-z0-9._-]{1,${limits.http.requestIdLength}}$` },
      },
      'Token-Expires': {
        description: `On every answer to a token that expires within ${limits.tokens.warnBefore / 86_400_000} days (and only then): when it expires, as an HTTP date (RFC 9110 IMF-fixdate, like \`Expires\`). From then on the token is refused with 401 / 40103.`,
        schema: { type: 'string', examples: ['Wed, 09 Dec 2026 16:40:00 GMT'] },
      },
    },
  }
}

type ErrorResponses = ReturnType<typeof errorResponses>

/**
 * The OpenAPI 3.1 document of the contract, built from the Valibot schemas the service validates
 * with and from the error table the responses use, so that neither can drift from the code.
 */
export function buildOpenApiDocument(): Record<string, unknown> {
  const errors = errorResponses()
  return {
    openapi: '3.1.0',
    info: info(),
    servers,
    tags,
    security: [{ bearerAuth: [] }],
    paths: { '/plants': { post: createPlantOperation(errors) }, ...probePaths(errors) },
    components: components(),
  }
}
