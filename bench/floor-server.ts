// The floor of the service's design: a minimal coalescing server. node:http, the same driver, the
// same `unnest` statement, at most 2 statements in flight with the creates that arrive meanwhile
// waiting to go together (as the service's batcher), and nothing else: no authentication, no
// validation beyond JSON.parse, no log, no metrics, no deadline, no retry look-up (a conflict is
// answered 200 as if it were a retry). The service at this server's rate would cost nothing for
// everything the contract adds. DATABASE_URL names the database; prints its port on the first
// line of stdout. FLOOR_DRIVER=pg sends the same statement through `pg` instead (a pool of as
// many connections, the statement named): the same design on another driver, which the rates
// part compares (`--floor-pg`). On `postgres`, each connection's backend is primed first, as the
// service's statement slots prime theirs.

import { createServer, type ServerResponse } from 'node:http'
import pg from 'pg'
import postgres from 'postgres'
import { primer } from '../src/db/reach/slots.ts'
import { limits } from '../src/limits.ts'

type Create = { id: string; name: string; tag: string | null; res: ServerResponse }

// The service's own batch limits, so that the floor is measured on the same terms.
const { maxInFlight, maxBatch } = limits.batch
const onPg = process.env.FLOOR_DRIVER === 'pg'
// Each statement written at once, as the service's connections do (src/db/reach/sql.ts; the
// driver's types omit the option, which is the service's patch of it).
const sql = postgres(process.env.DATABASE_URL ?? '', {
  max: maxInFlight,
  onnotice: () => {},
  ...({ write_at_once: true } as object),
})
const pool = onPg
  ? new pg.Pool({ connectionString: process.env.DATABASE_URL, max: maxInFlight })
  : undefined
// Each connection's backend primed before the first create, as the service's statement slots
// do (src/db/reach/slots.ts): part of the design. The pool opens one connection per primer sent
// at once. `pg`'s backends were not seen to need it, and are left as they are.
if (pool === undefined) await Promise.all(Array.from({ length: maxInFlight }, () => primer(sql)))

const unnestText = `insert into plants (id, name, tag, created_by)
  select * from unnest($1::int8[], $2::text[], $3::text[], $4::text[])
  on conflict (id) do nothing
  returning id::text`

/** The batch as one `unnest` statement, on the driver asked for. */
function insert(batch: Create[]): Promise<unknown> {
  if (pool !== undefined)
    return pool.query({
      name: 'unnest',
      text: unnestText,
      values: [
        batch.map((c) => c.id),
        batch.map((c) => c.name),
        batch.map((c) => c.tag),
        batch.map(() => 'floor'),
      ],
    })
  return sql`
      insert into plants (id, name, tag, created_by)
      select * from unnest(
        ${batch.map((c) => c.id)}::int8[],
        ${batch.map((c) => c.name)}::text[],
        ${batch.map((c) => c.tag)}::text[],
        ${batch.map(() => 'floor')}::text[]
      )
      on conflict (id) do nothing
      returning id::text`
}

const queue: Create[] = []
let inFlight = 0

function answer(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  })
  res.end(body)
}

function send(): void {
  while (inFlight < maxInFlight && queue.length > 0) {
    const batch = queue.splice(0, maxBatch)
    inFlight++
    insert(batch)
      .then(
        () => {
          for (const c of batch)
            answer(c.res, 200, JSON.stringify({ id: c.id, name: c.name, tag: c.tag }))
        },
        () => {
          for (const c of batch) answer(c.res, 503, '{"error":"unavailable"}')
        },
      )
      .finally(() => {
        // The slot is free again, and the creates that waited go together.
        inFlight--
        send()
      })
  }
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8')
    let body: { name?: unknown; tag?: unknown }
    try {
      body = JSON.parse(text)
    } catch {
      answer(res, 400, '{"error":"bad json"}')
      return
    }
    // JSON.parse rounds an int64 to a double; the id is taken from the text, as the service does.
    const id = /"id"\s*:\s*(-?\d+)/.exec(text)?.[1]
    if (id === undefined) {
      answer(res, 400, '{"error":"no id"}')
      return
    }
    queue.push({
      id,
      name: String(body.name),
      tag: typeof body.tag === 'string' ? body.tag : null,
      res,
    })
    send()
  })
})

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const address = server.address()
  process.stdout.write(`${typeof address === 'object' && address ? address.port : ''}\n`)
})
process.on('SIGTERM', () =>
  server.close(() => Promise.all([sql.end(), pool?.end()]).then(() => process.exit(0))),
)
