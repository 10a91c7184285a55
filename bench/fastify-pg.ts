// What a create costs written the usual way, as the rates part compares it: Fastify 5 and `pg`
// with a pool of 10, one single-row INSERT per request (a named statement), sent at once. A
// bearer check against the bench's token (one string comparison, no database), the body checked
// by a JSON schema (Fastify's own validation), the id kept exact as text, a conflict answered 409
// and a database error 503. No log, metrics, deadline or batching. DATABASE_URL names the
// database, TOKEN the token; prints its port on the first line of stdout.
import Fastify from 'fastify'
import pg from 'pg'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
const expected = `Bearer ${process.env.TOKEN ?? ''}`

const app = Fastify({ logger: false })

// JSON.parse rounds an int64 to a double: the body is parsed with the id kept as its text, as
// the service does.
app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, text, done) => {
  try {
    const body = JSON.parse(String(text))
    const id = /"id"\s*:\s*(-?\d+)/.exec(String(text))?.[1]
    if (body !== null && typeof body === 'object' && id !== undefined) body.id = id
    done(null, body)
  } catch (error) {
    done(error as Error, undefined)
  }
})

// A named statement: parsed once per connection, as pgbench's `-M prepared`.
const insert =
  "insert into plants (id, name, tag, created_by) values ($1, $2, $3, 'fastify') on conflict (id) do nothing returning id::text"

type Body = { id: string; name: string; tag?: string | null }

app.post<{ Body: Body }>(
  '/plants',
  {
    onRequest: async (request, reply) => {
      if (request.headers.authorization !== expected) await reply.code(401).send()
    },
    schema: {
      body: {
        type: 'object',
        required: ['id', 'name'],
        additionalProperties: false,
        properties: {
          id: { type: 'string', pattern: '^-?[0-9]{1,19}$' },
          name: { type: 'string', minLength: 1, maxLength: 100 },
          tag: { type: ['string', 'null'], maxLength: 100 },
        },
      },
    },
  },
  async (request, reply) => {
    const { id, name, tag = null } = request.body
    try {
      const { rows } = await pool.query({
        name: 'insert-plant',
        text: insert,
        values: [id, name, tag],
      })
      if (rows.length === 0) return reply.code(409).send({ error: 'conflict' })
      return { id, name, tag }
    } catch {
      return reply.code(503).send({ error: 'unavailable' })
    }
  },
)

const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`${new URL(address).port}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => pool.end().then(() => process.exit(0)))
})
