import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import zlib from 'node:zlib'
import { failsChecksum, generateToken } from '../src/auth/tokens.ts'

const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

describe('the checksummed token format', () => {
  test('every generated token passes its checksum, as zlib computes it', () => {
    for (let i = 0; i < 1000; i++) {
      const t = generateToken()
      assert.equal(failsChecksum(t), false, t)
      let n = zlib.crc32(t.slice(0, -6))
      let digits = ''
      for (; n > 0; n = Math.floor(n / 62)) digits = base62[n % 62] + digits
      assert.equal(t.slice(-6), digits.padStart(6, '0'))
    }
  })

  test('any one character changed, in the body or the checksum, fails the checksum', () => {
    const t = generateToken()
    for (let i = 4; i < t.length; i++) {
      const other = t[i] === 'a' ? 'b' : 'a'
      assert.equal(failsChecksum(t.slice(0, i) + other + t.slice(i + 1)), true, `at ${i}`)
    }
  })

  test('another shape is not judged (it is looked up): a legacy token, another prefix, a non-base62 or non-ASCII character', () => {
    const t = generateToken()
    for (const other of [
      `pst_${'A'.repeat(43)}`,
      `pst_${'-'.repeat(43)}`,
      `xyz_${t.slice(4)}`,
      `${t.slice(0, 10)}_${t.slice(11)}`,
      `${t.slice(0, 10)}é${t.slice(11)}`,
      `${t.slice(0, -1)}-`,
      t.slice(0, -1),
      `${t}0`,
    ])
      assert.equal(failsChecksum(other), false, other)
  })
})
