import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import fc from 'fast-check'
import { isFailure } from '../../src/outcome.ts'
import { parseJsonBody } from '../../src/plants/parse-json.ts'
import { validateNewPlant } from '../../src/plants/schema.ts'
import { keptAliveClient } from '../helpers/drive.ts'
import { startTestServer } from '../helpers/server.ts'

const s = await startTestServer({ after })
// A fixed seed keeps CI repeatable; FC_SEED explores others. fast-check reports the seed and
// the shrunk counterexample of a failure, and the seed is printed here too.
const seed = Number(process.env.FC_SEED ?? 5_000_001)
const runs = Number(process.env.FC_RUNS ?? 5000)
process.stderr.write(`hostile-bodies: fast-check seed ${seed} (FC_SEED=${seed} repeats this run)\n`)

let nextId = BigInt(Date.now()) * 10_000n
const FRESH = '"__FRESH_ID__"'

const numberLiteral = fc.oneof(
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
  fc.double().filter(Number.isFinite).map(String),
  fc.constantFrom(
    '-0',
    '0.0',
    '1e3',
    '1E-3',
    '1.0',
    '01',
    '-',
    '1.',
    '.5',
    '+1',
    '0x10',
    'Infinity',
    'NaN',
    '9223372036854775807',
    '9223372036854775808',
    '-9223372036854775808',
    '-9223372036854775809',
    '9007199254740993',
    `1${'0'.repeat(1000)}`,
    '1e400',
  ),
)
const edgeString = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 5 }),
  fc
    .constantFrom(199, 200, 201, 99, 100, 101)
    .chain((n) => fc.constantFrom('a', 'é', '🌵', '\u0000', '\ud800').map((c) => c.repeat(n))),
  fc.string({ unit: 'binary', maxLength: 30 }),
)
const member = fc.oneof(
  fc.constant(['id', FRESH]),
  numberLiteral.map((n) => ['id', n]),
  edgeString.map((t) => ['name', JSON.stringify(t)]),
  edgeString.map((t) => ['tag', JSON.stringify(t)]),
  fc
    .constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty')
    .chain((k) =>
      fc.oneof(
        fc.constant([k, '{"name":"polluted","id":1}']),
        fc.constant([k, 'null']),
        fc.constant([k, '"x"']),
      ),
    ),
  fc.json({ maxDepth: 3 }).map((v) => ['extra', v]),
)
const objectBody = fc
  .array(member, { maxLength: 6 })
  .map((members) => `{${members.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`)
const validish = fc
  .tuple(edgeString, fc.option(edgeString, { nil: undefined }))
  .map(
    ([name, tag]) =>
      `{"id":${FRESH},"name":${JSON.stringify(name)}${tag === undefined ? '' : `,"tag":${JSON.stringify(tag)}`}}`,
  )
const deep = fc.integer({ min: 1, max: 9000 }).map((d) => `${'['.repeat(d)}${']'.repeat(d)}`)
const deepObject = fc
  .integer({ min: 1, max: 2000 })
  .map((d) => `{"id":${FRESH},"name":"deep","x":${'{"a":'.repeat(d)}1${'}'.repeat(d)}}`)
const truncated = fc.tuple(objectBody, fc.nat()).map(([b, n]) => b.slice(0, n % (b.length + 1)))
const randomBytes = fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b))

const body: fc.Arbitrary<string | Buffer> = fc.oneof(
  validish,
  objectBody,
  objectBody,
  fc.json().map(String),
  randomBytes,
  truncated,
  deep,
  deepObject,
  numberLiteral,
)

describe('hostile bodies', () => {
  test(`${runs} random bodies: each answered 200 or an Error-shaped 4xx, what is stored equals what was sent`, async () => {
    let created = 0
    // One kept-alive connection through node:http: fetch cost the test several times the CPU
    // the service spent on each body, taken from the files running beside it.
    const client = keptAliveClient(`${s.base}/plants`, 1)
    after(() => client.close())
    await fc.assert(
      fc.asyncProperty(body, async (raw) => {
        const id = String(++nextId)
        const sent = typeof raw === 'string' ? raw.replaceAll(FRESH, id) : raw
        const res = await client.post(sent, {
          authorization: `Bearer ${s.token}`,
          'content-type': 'application/json',
        })
        const answer = JSON.parse(res.text) as Record<string, unknown>
        if (res.status === 200) {
          created++
          const parsed = parseJsonBody(typeof sent === 'string' ? Buffer.from(sent) : sent)
          assert.ok(!isFailure(parsed))
          const plant = validateNewPlant(parsed.value)
          assert.ok(!isFailure(plant))
          const [row] = await s.db
            .sql`select name, tag from plants where id = ${plant.id.toString()}::int8`
          assert.deepEqual({ ...row }, { name: plant.name, tag: plant.tag ?? null })
          assert.deepEqual(
            answer,
            plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag },
          )
          return
        }
        assert.ok(res.status >= 400 && res.status < 500, `${res.status} ${JSON.stringify(answer)}`)
        assert.deepEqual(Object.keys(answer).sort(), ['error', 'message'])
        assert.equal(typeof answer.message, 'string')
        assert.equal(Math.floor(Number(answer.error) / 100), res.status)
      }),
      { seed, numRuns: runs },
    )
    assert.ok(created > runs / 20, `only ${created} bodies were valid plants`)
    assert.equal((await fetch(`${s.base}/healthz`)).status, 200, 'the process is still up')
    assert.equal(Object.hasOwn({}, 'name'), false, 'no prototype was polluted')
  })

  test('100,000-deep nesting: the parser answers 40004 or a value, without overflowing the stack', () => {
    for (const text of [
      `${'['.repeat(100_000)}${']'.repeat(100_000)}`,
      `{"id":1,"x":${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}}`,
    ]) {
      const parsed = parseJsonBody(Buffer.from(text))
      if (isFailure(parsed)) assert.equal(parsed.code, 40004)
      else assert.ok(isFailure(validateNewPlant(parsed.value)))
    }
  })

  test('100,000-deep nesting over HTTP is refused by the size limit (40003)', async () => {
    const res = await s.post(`${'['.repeat(100_000)}${']'.repeat(100_000)}`)
    assert.equal(res.status, 400)
    assert.equal(((await res.json()) as { error: number }).error, 40003)
  })
})
