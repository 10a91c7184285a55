import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer, uniqueId } from './helpers/server.ts'

const s = await startTestServer({ after })

async function expect40005(body: string, ...mentions: string[]): Promise<void> {
  const res = await s.post(body)
  assert.equal(res.status, 400, body)
  const json = (await res.json()) as { error: number; message: string }
  assert.equal(json.error, 40005, JSON.stringify(json))
  for (const m of mentions)
    assert.ok(json.message.includes(m), `${JSON.stringify(json.message)} should mention ${m}`)
}

describe('a body that is JSON but not a valid NewPlant is refused with 400/40005', () => {
  for (const id of [
    '1.0',
    '1e3',
    '"12"',
    'null',
    'true',
    '[1]',
    '9223372036854775808',
    '-9223372036854775809',
    `1${'0'.repeat(400)}`,
  ]) {
    test(`id ${id.length > 30 ? `${id.slice(0, 10)}… (${id.length} digits)` : id} is refused, naming id`, async () => {
      await expect40005(`{"id":${id},"name":"x"}`, 'id:')
    })
  }

  test('a missing id or name is refused as required', async () => {
    await expect40005('{"name":"x"}', 'id: is required')
    await expect40005(`{"id":${uniqueId()}}`, 'name: is required')
  })

  test('a body that is not an object is refused', async () => {
    for (const body of ['[]', '"plant"', '42', 'null'])
      await expect40005(body, 'must be a JSON object')
  })

  test('name: empty or over 200 code points is refused; 200 emoji pass', async () => {
    await expect40005(`{"id":${uniqueId()},"name":""}`, 'name: must be 1 to 200 characters')
    await expect40005(
      JSON.stringify({ id: uniqueId(), name: 'a'.repeat(201) }),
      'name: must be 1 to 200 characters',
    )
    await expect40005(
      JSON.stringify({ id: uniqueId(), name: '🌵'.repeat(201) }),
      'name: must be 1 to 200 characters',
    )
    assert.equal((await s.post({ id: uniqueId(), name: '🌵'.repeat(200) })).status, 200)
  })

  test('tag: null, empty or over 100 code points is refused', async () => {
    await expect40005(`{"id":${uniqueId()},"name":"x","tag":null}`, 'tag: must be a string')
    await expect40005(
      `{"id":${uniqueId()},"name":"x","tag":""}`,
      'tag: must be 1 to 100 characters',
    )
    await expect40005(
      JSON.stringify({ id: uniqueId(), name: 'x', tag: 'é'.repeat(101) }),
      'tag: must be 1 to 100 characters',
    )
  })

  test('U+0000 in name or tag is refused with 400, never 500', async () => {
    await expect40005(`{"id":${uniqueId()},"name":"a\\u0000b"}`, 'name: must not contain U+0000')
    await expect40005(
      `{"id":${uniqueId()},"name":"a","tag":"\\u0000"}`,
      'tag: must not contain U+0000',
    )
  })

  test('a lone surrogate in name or tag is refused with 400, never 500', async () => {
    await expect40005(`{"id":${uniqueId()},"name":"\\ud800"}`, 'name: must be well-formed Unicode')
    await expect40005(
      `{"id":${uniqueId()},"name":"ok","tag":"x\\udc00"}`,
      'tag: must be well-formed Unicode',
    )
  })

  test('every offending member is named in one message', async () => {
    await expect40005(
      '{"id":1.5,"name":"","tag":7}',
      'id: must be an integer',
      'name: must be 1 to 200 characters',
      'tag: must be a string',
    )
  })

  test('nothing is stored for a refused body', async () => {
    const id = uniqueId()
    await expect40005(`{"id":${id},"name":""}`)
    assert.equal((await s.db.sql`select 1 from plants where id = ${id}`).length, 0)
  })
})
