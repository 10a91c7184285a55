import { type Failure, failure } from '../http/errors.ts'

const decoder = new TextDecoder('utf-8', { fatal: true })
const integerLiteral = /^-?(?:0|[1-9][0-9]*)$/

/**
 * Parses a request body as UTF-8 JSON. A top-level `id` written as an integer literal comes back
 * as a `bigint` with exactly the written value; `1.0` or `1e3` stay numbers (and fail validation).
 * A leading UTF-8 byte order mark is ignored, as RFC 8259 allows.
 */
export function parseJsonBody(bytes: Uint8Array): { value: unknown } | Failure {
  let text: string
  try {
    text = decoder.decode(bytes)
  } catch {
    return failure(40004, 'body: is not valid UTF-8')
  }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return failure(40004, 'body: is not well-formed JSON')
  }
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const record = value as Record<string, unknown>
    if (typeof record.id === 'number') {
      const source = usualIdSource(text) ?? topLevelIdSource(text)
      if (source !== undefined && integerLiteral.test(source)) record.id = exactId(source)
    }
  }
  return { value }
}

// The longest int64 literal, -9223372036854775808, has 20 characters; converting a longer one
// costs time that grows with the square of its length (2.2 ms at 16,000 digits), so it is not
// converted: any value past the range is refused alike.
const longestId = 20
const pastRange = 2n ** 63n

/** An integer literal as a bigint; one longer than any int64 as a value just past the range. */
function exactId(source: string): bigint {
  if (source.length <= longestId) return BigInt(source)
  return source.startsWith('-') ? -pastRange - 1n : pastRange
}

/**
 * The id's source text in the usual body, without a scan: it starts `{"id":` and a number, has no
 * backslash (so no key is written with escapes) and no other `"id"` anywhere, so that member is
 * the only top-level `id`. `undefined` for any other body.
 */
function usualIdSource(text: string): string | undefined {
  if (!text.startsWith('{"id":')) return undefined
  const c = text.charCodeAt(6)
  if (!(c === 0x2d || (c >= 0x30 && c <= 0x39))) return undefined
  if (text.indexOf('"id"', 6) !== -1 || text.indexOf('\\') !== -1) return undefined
  let j = 7
  while (j < text.length && isNumberChar(text.charCodeAt(j))) j++
  return text.slice(6, j)
}

/**
 * The source text of the number given for the top-level member `id` (the last one, as
 * `JSON.parse` keeps the last of repeated members). `text` must be a well-formed JSON object.
 */
function topLevelIdSource(text: string): string | undefined {
  let depth = 0
  let expectKey = false
  let keyIsId = false
  let source: string | undefined
  const n = text.length
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22 /* " */) {
      let j = i + 1
      let escaped = false
      for (; j < n; j++) {
        const d = text.charCodeAt(j)
        if (d === 0x5c /* \ */) {
          escaped = true
          j++
        } else if (d === 0x22) break
      }
      if (depth === 1 && expectKey) {
        const key = escaped ? (JSON.parse(text.slice(i, j + 1)) as string) : text.slice(i + 1, j)
        keyIsId = key === 'id'
        if (keyIsId) source = undefined
      }
      i = j
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      depth++
      if (depth === 1) expectKey = true
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--
    } else if (depth === 1 && c === 0x2c /* , */) {
      expectKey = true
    } else if (depth === 1 && c === 0x3a /* : */) {
      expectKey = false
    } else if (depth === 1 && keyIsId && (c === 0x2d || (c >= 0x30 && c <= 0x39))) {
      let j = i + 1
      while (j < n && isNumberChar(text.charCodeAt(j))) j++
      source = text.slice(i, j)
      i = j - 1
    }
  }
  return source
}

function isNumberChar(c: number): boolean {
  // digits, '+', '-', '.', 'e', 'E'
  return (
    (c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2d || c === 0x2e || c === 0x65 || c === 0x45
  )
}
