import { createHash, randomBytes } from 'node:crypto'

/** The prefix of every token this service issues, so that a leaked one is easy to recognise. */
export const tokenPrefix = 'pst_'

/** Token names: what logs and `plants.created_by` show. */
export const tokenNamePattern = /^[A-Za-z0-9._-]{1,64}$/

const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** Random characters of a token: 43 of base62 are 256 bits (43 × log2 62 = 256.03). */
const randomLength = 43
/** The checksum's characters: CRC32 in base62, zero-padded (62^6 > 2^32). */
const checksumLength = 6

// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as zlib and GitHub's scanners compute it.
const crcTable = Uint32Array.from({ length: 256 }, (_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
  return c >>> 0
})

/** The CRC32 (IEEE) of a text's UTF-8 bytes. */
export function crc32(text: string): number {
  let crc = 0xffffffff
  for (const byte of Buffer.from(text, 'utf8'))
    crc = (crcTable[(crc ^ byte) & 0xff] ?? 0) ^ (crc >>> 8)
  return (crc ^ 0xffffffff) >>> 0
}

/** `n` in base62, zero-padded to `width` characters. */
function toBase62(n: number, width: number): string {
  let text = ''
  for (let rest = n; rest > 0; rest = Math.floor(rest / 62)) text = base62[rest % 62] + text
  return text.padStart(width, '0')
}

/** Random base62 characters, each uniform (bytes of 248 and above are drawn again). */
function randomBase62(length: number): string {
  let text = ''
  while (text.length < length) {
    for (const byte of randomBytes(length)) {
      if (byte < 248 && text.length < length) text += base62[byte % 62]
    }
  }
  return text
}

/** A new token: the prefix, 256 random bits in base62, and the CRC32 of both. */
export function generateToken(): string {
  const body = tokenPrefix + randomBase62(randomLength)
  return body + toBase62(crc32(body), checksumLength)
}

// The value of each base62 digit by character code; -1 for any other ASCII character.
const digitOf = new Int8Array(128).fill(-1)
for (let i = 0; i < base62.length; i++) digitOf[base62.charCodeAt(i)] = i

/** The base62 value of a character code; -1 when it is no base62 digit. */
const digit = (code: number) => (code < 128 ? (digitOf[code] ?? -1) : -1)

/**
 * Whether a token is malformed on its face: of the checksummed shape (GitHub's scheme: the
 * prefix, 43 random base62 characters, then the CRC32 (IEEE) of everything before it in 6 base62
 * characters), with a checksum that does not match (a typo, a truncation, or a look-alike).
 * Tokens issued before the checksum (the prefix and 43 base64url characters) have another length. Such a token is refused without a look-up;
 * any other shape (the tokens issued before the checksum among them) is looked up as before.
 * It runs on every request, so it reads the characters once, with no regular expression and no
 * allocation: in that shape every character is ASCII, so its code is its byte.
 */
export function failsChecksum(token: string): boolean {
  if (token.length !== tokenPrefix.length + randomLength + checksumLength) return false
  if (!token.startsWith(tokenPrefix)) return false
  const end = token.length - checksumLength
  let crc = 0xffffffff
  for (let i = 0; i < end; i++) {
    const code = token.charCodeAt(i)
    if (i >= tokenPrefix.length && digit(code) < 0) return false
    crc = (crcTable[(crc ^ code) & 0xff] ?? 0) ^ (crc >>> 8)
  }
  let given = 0
  for (let i = end; i < token.length; i++) {
    const d = digit(token.charCodeAt(i))
    if (d < 0) return false
    given = given * 62 + d
  }
  return given !== (crc ^ 0xffffffff) >>> 0
}

/** The SHA-256 digest of a token: all that the database keeps of it. */
export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token).digest()
}
