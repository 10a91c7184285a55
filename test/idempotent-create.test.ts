import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer, uniqueId } from './helpers/server.ts'

const s = await startTestServer({ after })

describe('the same id twice (idempotent create)', () => {
  test('a retry with the same name and tag answers 200 with the plant and changes nothing', async () => {
    const id = uniqueId()
    const first = await s.post({ id, name: 'Orchid', tag: 'flower' })
    assert.equal(first.status, 200)
    const [before] = await s.db.sql`select created_at from plants where id = ${id}`
    const again = await s.post({ id, name: 'Orchid', tag: 'flower', extra: 1 })
    assert.equal(again.status, 200)
    assert.deepEqual(await again.json(), { name: 'Orchid', tag: 'flower' })
    const rows = await s.db.sql`select created_at from plants where id = ${id}`
    assert.equal(rows.length, 1)
    assert.deepEqual(rows[0]?.created_at, before?.created_at)
  })

  test('a retry without a tag matches a stored plant without a tag', async () => {
    const id = uniqueId()
    await s.post({ id, name: 'Mint' })
    const again = await s.post({ id, name: 'Mint' })
    assert.equal(again.status, 200)
    assert.deepEqual(await again.json(), { name: 'Mint' })
  })

  for (const [label, second] of [
    ['a different name', { name: 'Rose', tag: 'flower' }],
    ['a different tag', { name: 'Tulip', tag: 'bulb' }],
    ['a tag where none was stored', { name: 'Tulip', tag: 'flower' }],
    ['no tag where one was stored', { name: 'Tulip' }],
  ] as const) {
    test(`the same id with ${label} answers 400/40009 naming the id, and keeps the stored row`, async () => {
      const id = uniqueId()
      const firstBody =
        label === 'a tag where none was stored'
          ? { id, name: 'Tulip' }
          : { id, name: 'Tulip', tag: 'flower' }
      assert.equal((await s.post(firstBody)).status, 200)
      const res = await s.post({ id, ...second })
      assert.equal(res.status, 400)
      const body = (await res.json()) as { error: number; message: string }
      assert.equal(body.error, 40009)
      assert.ok(body.message.includes(String(id)), body.message)
      const [row] = await s.db.sql`select name, tag from plants where id = ${id}`
      assert.deepEqual({ ...row }, { name: 'Tulip', tag: firstBody.tag ?? null })
    })
  }

  test('the conflict check is exact for ids beyond 2^53', async () => {
    const literal = '9223372036854775806'
    const other = '9223372036854775807'
    await s.db.sql`delete from plants where id in (${literal}::int8, ${other}::int8)`
    assert.equal((await s.post(`{"id":${literal},"name":"big"}`)).status, 200)
    // As doubles both ids are the same number; as int64 they differ, so this is a new plant.
    assert.equal((await s.post(`{"id":${other},"name":"bigger"}`)).status, 200)
  })

  test('concurrent creates of one id with different contents: exactly one 200, the rest 40009', async () => {
    const id = uniqueId()
    const responses = await Promise.all(
      Array.from({ length: 12 }, (_, i) => s.post({ id, name: `contender ${i}` })),
    )
    const statuses = await Promise.all(
      responses.map(async (r) => [r.status, ((await r.json()) as { error?: number }).error]),
    )
    const winners = statuses.filter(([status]) => status === 200)
    assert.equal(winners.length, 1, JSON.stringify(statuses))
    assert.ok(
      statuses
        .filter(([status]) => status !== 200)
        .every(([status, code]) => status === 400 && code === 40009),
    )
    const rows = await s.db.sql`select name from plants where id = ${id}`
    assert.equal(rows.length, 1)
  })

  test('concurrent identical creates: all 200, one row', async () => {
    const id = uniqueId()
    const responses = await Promise.all(
      Array.from({ length: 12 }, () => s.post({ id, name: 'Twin', tag: 't' })),
    )
    assert.deepEqual(
      responses.map((r) => r.status),
      Array(12).fill(200),
    )
    for (const r of responses) assert.deepEqual(await r.json(), { name: 'Twin', tag: 't' })
    const rows = await s.db.sql`select 1 from plants where id = ${id}`
    assert.equal(rows.length, 1)
  })
})
