import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import fc from 'fast-check'
import * as v from 'valibot'
import { isFailure } from '../src/outcome.ts'
import { parseJsonBody } from '../src/plants/parse-json.ts'
import { NewPlant, newPlantAtOnce, validateNewPlant } from '../src/plants/schema.ts'
import { startTestServer } from './helpers/server.ts'

const s = await startTestServer({ after })
const seed = Number(process.env.FC_SEED ?? 20261121)

let nextId = BigInt(Date.now()) * 1000n
const freshId = () => String(++nextId)

// Bodies near the valid shape: each member valid, invalid or missing.
const text = fc.oneof(
  fc.string({ unit: 'grapheme', minLength: 0, maxLength: 210 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.constantFrom(
    '',
    '\u0000',
    '\ud800',
    'a\udc00b',
    '🌵'.repeat(200),
    '🌵'.repeat(201),
    'x'.repeat(100),
    'x'.repeat(101),
  ),
)
const idLiteral = fc.oneof(
  fc.constant('FRESH'),
  fc.bigInt({ min: -(2n ** 64n), max: 2n ** 64n }).map(String),
  fc.constantFrom(
    '1.0',
    '1e3',
    '-0',
    '"12"',
    'null',
    'true',
    '[]',
    '{}',
    '9223372036854775807',
    '-9223372036854775808',
    '9223372036854775808',
    '0.5',
  ),
)
const member = (key: string, value: fc.Arbitrary<string>) =>
  fc.option(
    value.map((v) => `${JSON.stringify(key)}:${v}`),
    { nil: undefined },
  )
const nearlyValid = fc
  .tuple(
    member('id', idLiteral),
    member(
      'name',
      text.map((t) => JSON.stringify(t)),
    ),
    member(
      'tag',
      fc.oneof(
        text.map((t) => JSON.stringify(t)),
        fc.constant('null'),
      ),
    ),
    member('extra', fc.json()),
  )
  .map((members) => `{${members.filter((m) => m !== undefined).join(',')}}`)
const anyJson = fc.json({ depthSize: 'small' })
const anyBytes = fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b).toString('latin1'))
const valid = fc
  .record({
    name: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 }),
    tag: fc.option(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 30 }), {
      nil: undefined,
    }),
  })
  .map(
    ({ name, tag }) =>
      `{"id":FRESH,"name":${JSON.stringify(name)}${tag === undefined ? '' : `,"tag":${JSON.stringify(tag)}`}}`,
  )
const body = fc.oneof(valid, nearlyValid, nearlyValid, anyJson, anyBytes)

describe('property: any body gets 200 or an Error-shaped 4xx, never a 5xx', () => {
  test('the parser and validator never throw, and refuse with 40004 or 40005 only', () => {
    fc.assert(
      fc.property(body, (b) => {
        const parsed = parseJsonBody(Buffer.from(b.replace('FRESH', '1')))
        if (isFailure(parsed)) {
          assert.equal(parsed.code, 40004)
          return
        }
        const result = validateNewPlant(parsed.value)
        if (isFailure(result)) {
          assert.equal(result.code, 40005)
          assert.match(result.message, /^(id|name|tag|body): /)
        }
      }),
      { seed, numRuns: 2000 },
    )
  })

  test('the hand-written check of a body takes exactly what the schema takes, with the same output', () => {
    fc.assert(
      fc.property(body, (b) => {
        const parsed = parseJsonBody(Buffer.from(b.replace('FRESH', '1')))
        if (isFailure(parsed)) return
        const value = parsed.value
        const reference = v.safeParse(NewPlant, value)
        const isObject = typeof value === 'object' && value !== null && !Array.isArray(value)
        const atOnce = isObject ? newPlantAtOnce(value as Record<string, unknown>) : undefined
        if (reference.success) {
          assert.ok(isObject, b)
          assert.deepEqual(atOnce, reference.output, b)
          assert.deepEqual(validateNewPlant(value), reference.output, b)
        } else assert.equal(atOnce, undefined, b)
      }),
      { seed, numRuns: 5000 },
    )
  })

  test('the top-level id comes back exactly as written: the last id member, integer literals as bigint (one longer than any int64 as the value just past the range)', () => {
    // Objects whose members are written out: the id (once or repeated), other keys (some of
    // them "id" written with an escape, or nested objects with their own id), in any order.
    const number = fc.oneof(
      fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
      fc.constantFrom('1.0', '1e3', '-0', '0', '2.5E-3', '9007199254740993'),
    )
    const otherMember = fc.oneof(
      fc.tuple(fc.constantFrom('"name"', '"tag"', '"x"', '"ids"'), fc.json({ maxDepth: 2 })),
      fc.tuple(fc.constant('"name"'), fc.constantFrom('"id"', '"\\"id\\""', '{"id":7}')),
      fc.tuple(fc.constantFrom('"\\u0069d"', '"i\\u0064"'), number),
    )
    const idMember = number.map((n) => ['"id"', n] as [string, string])
    const space = fc.constantFrom('', ' ', '\n')
    const object = fc
      .tuple(idMember, fc.array(fc.oneof(otherMember, idMember), { maxLength: 4 }), space)
      .map(([first, rest, ws]) => {
        const members = [first, ...rest]
        return `{${members.map(([k, v]) => `${k}:${ws}${v}`).join(',')}}`
      })
    fc.assert(
      fc.property(object, (text) => {
        const parsed = parseJsonBody(Buffer.from(text))
        assert.ok(!isFailure(parsed), text)
        const id = (parsed.value as { id: unknown }).id
        // What JSON.parse keeps for id is the last top-level member named id, however written.
        const reference = JSON.parse(
          text.replace(/("id"|"\\u0069d"|"i\\u0064"):\s*(-?[0-9][0-9.eE+-]*)/g, '$1:"$2"'),
        ) as { id: string }
        const literal = reference.id
        // A literal longer than any int64 (20 characters) is not converted: it comes back as
        // the value just past the range on its side, which validation refuses alike.
        const expected = !/^-?(?:0|[1-9][0-9]*)$/.test(literal)
          ? Number(literal)
          : literal.length <= 20
            ? BigInt(literal)
            : literal.startsWith('-')
              ? -(2n ** 63n) - 1n
              : 2n ** 63n
        assert.deepEqual(id, expected, text)
      }),
      { seed, numRuns: 3000 },
    )
  })

  test('the service answers every body with 200 or a 400 Error, and stores what it acknowledged', async () => {
    await fc.assert(
      fc.asyncProperty(body, async (raw) => {
        const id = freshId()
        const b = raw.replace('FRESH', id)
        const res = await s.post(b)
        const answer = (await res.json()) as Record<string, unknown>
        if (res.status === 200) {
          // What was acknowledged is stored exactly as sent.
          const sent = JSON.parse(b) as { name: string; tag?: string }
          const parsed = parseJsonBody(Buffer.from(b)) as { value: { id: bigint } }
          const rows = await s.db
            .sql`select name, tag from plants where id = ${parsed.value.id.toString()}::int8`
          assert.deepEqual({ ...rows[0] }, { name: sent.name, tag: sent.tag ?? null })
          assert.deepEqual(
            answer,
            sent.tag === undefined ? { name: sent.name } : { name: sent.name, tag: sent.tag },
          )
          return
        }
        assert.equal(
          res.status,
          400,
          `${res.status} for ${JSON.stringify(b)}: ${JSON.stringify(answer)}`,
        )
        assert.deepEqual(Object.keys(answer).sort(), ['error', 'message'])
        assert.ok(
          [40001, 40004, 40005, 40009].includes(answer.error as number),
          JSON.stringify(answer),
        )
      }),
      { seed, numRuns: 300 },
    )
  })
})
