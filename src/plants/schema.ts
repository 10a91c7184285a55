import * as v from 'valibot'
import { type Failure, failure } from '../http/errors.ts'
import { limits } from '../limits.ts'

/** The int64 range of `plants.id`. */
export const idRange = { min: -(2n ** 63n), max: 2n ** 63n - 1n } as const

const idRangeMessage = `must be an integer from ${idRange.min} to ${idRange.max}`

/** A plant id: the body parser hands integer literals over as `bigint`, so nothing is rounded. */
export const PlantId = v.pipe(
  v.bigint('must be an integer'),
  // Metadata beside an action is the JSON Schema of what Valibot cannot express itself.
  v.metadata({ type: 'integer', format: 'int64' }),
  v.minValue(idRange.min, idRangeMessage),
  v.maxValue(idRange.max, idRangeMessage),
)

function codePoints(s: string): number {
  let n = 0
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    // A high surrogate followed by a low one is one code point.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1)
      if (d >= 0xdc00 && d <= 0xdfff) i++
    }
    n++
  }
  return n
}

// A lone surrogate cannot be stored as UTF-8 (`String.prototype.isWellFormed` is not in every
// runtime we support, so the check is written out).
function isWellFormed(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c < 0xd800 || c > 0xdfff) continue
    if (c > 0xdbff || i + 1 >= s.length) return false
    const d = s.charCodeAt(i + 1)
    if (d < 0xdc00 || d > 0xdfff) return false
    i++
  }
  return true
}

const hasNoNul = (s: string) => !s.includes('\u0000')

/** 1 to `max` code points. */
function lengthWithin(s: string, max: number): boolean {
  const n = codePoints(s)
  return n >= 1 && n <= max
}

/**
 * A text member: 1 to `max` code points, well-formed Unicode, no U+0000. (JSON Schema's
 * minLength and maxLength count code points too.)
 */
export function text(max: number) {
  return v.pipe(
    v.string('must be a string'),
    v.check(isWellFormed, 'must be well-formed Unicode (no lone surrogates)'),
    v.check(hasNoNul, 'must not contain U+0000'),
    v.metadata({ pattern: '^[^\\u0000]*$' }),
    v.check((s: string) => lengthWithin(s, max), `must be 1 to ${max} characters`),
    v.metadata({ minLength: 1, maxLength: max }),
  )
}

const idDescription =
  'Identification number of the plant, chosen by the client: an integer literal (no fraction, no exponent) in the int64 range, kept exactly (9007199254740993 is never rounded). It is also the idempotency key of the create.'
const nameDescription = `The name of the plant: 1 to ${limits.plant.name} characters (Unicode code points), no U+0000, no lone surrogates.`
const tagDescription = `Tag that specifies the type of the plant: 1 to ${limits.plant.tag} characters (Unicode code points), no U+0000, no lone surrogates. Omitted when none was given; null is refused.`

/** The body of `POST /plants`; members other than these are ignored. */
export const NewPlant = v.pipe(
  v.object(
    {
      id: v.pipe(PlantId, v.description(idDescription)),
      name: v.pipe(text(limits.plant.name), v.description(nameDescription)),
      tag: v.optional(v.pipe(text(limits.plant.tag), v.description(tagDescription))),
    },
    'must be a JSON object',
  ),
  v.description(
    'A plant to create. Members other than id, name and tag are ignored and not stored.',
  ),
)
export type NewPlant = v.InferOutput<typeof NewPlant>

/** The answer of `POST /plants`: the stored name and tag (no id, as in the seed). */
export const Plant = v.pipe(
  v.strictObject({
    name: v.pipe(text(limits.plant.name), v.description('The name of the plant, as stored')),
    tag: v.optional(
      v.pipe(text(limits.plant.tag), v.description('The tag, as stored; omitted when none')),
    ),
  }),
  v.description('The plant as stored (the seed defines no id member in it).'),
)
export type Plant = v.InferOutput<typeof Plant>

/** A text member's rules, the same predicates as `text(max)`, without Valibot's run. */
function isText(s: unknown, max: number): s is string {
  return typeof s === 'string' && isWellFormed(s) && hasNoNul(s) && lengthWithin(s, max)
}

/**
 * The NewPlant a parsed JSON object is when it meets every rule of the schema, checked by hand
 * (the usual body, at a fraction of the cost of Valibot's generic run, which is most of
 * validating it); `undefined` for any other, which the schema then judges and words the refusal
 * of. The same output as the schema's; test/plant-body.property.test.ts keeps the two in step.
 */
export function newPlantAtOnce(value: Record<string, unknown>): NewPlant | undefined {
  const { id, name, tag } = value
  if (typeof id !== 'bigint' || id < idRange.min || id > idRange.max) return undefined
  if (!isText(name, limits.plant.name)) return undefined
  if (tag === undefined) return { id, name }
  return isText(tag, limits.plant.tag) ? { id, name, tag } : undefined
}

/** Validates a parsed body; the message names each offending member and why. */
export function validateNewPlant(value: unknown): NewPlant | Failure {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return failure(40005, 'body: must be a JSON object')
  }
  const atOnce = newPlantAtOnce(value as Record<string, unknown>)
  if (atOnce !== undefined) return atOnce
  const result = v.safeParse(NewPlant, value, { abortPipeEarly: true })
  if (result.success) return result.output
  const seen = new Set<string>()
  const parts: string[] = []
  for (const issue of result.issues) {
    const key = issue.path?.[0]?.key
    const where = typeof key === 'string' ? key : 'body'
    if (seen.has(where)) continue
    seen.add(where)
    parts.push(
      `${where}: ${issue.input === undefined && where !== 'body' ? 'is required' : issue.message}`,
    )
  }
  return failure(40005, parts.join('; '))
}
