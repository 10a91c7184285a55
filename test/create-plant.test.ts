import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { holdPlantsLock } from './helpers/database.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { sleep } from './helpers/wait.ts'

const s = await startTestServer({ after })

describe('POST /plants creates a plant', () => {
  test('answers 200 with the stored name and tag, and stores the row', async () => {
    const id = uniqueId()
    const res = await s.post({ id, name: 'Monstera', tag: 'tropical' })
    assert.equal(res.status, 200)
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/)
    assert.deepEqual(await res.json(), { name: 'Monstera', tag: 'tropical' })
    const rows = await s.db.sql`select id, name, tag, created_by from plants where id = ${id}`
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      [{ id: String(id), name: 'Monstera', tag: 'tropical', created_by: rows[0]?.created_by }],
    )
    assert.match(String(rows[0]?.created_by), /^test-/)
  })

  test('omits tag from the answer and stores NULL when no tag is given', async () => {
    const id = uniqueId()
    const res = await s.post({ id, name: 'Fern' })
    assert.deepEqual(await res.json(), { name: 'Fern' })
    const [row] = await s.db.sql`select tag from plants where id = ${id}`
    assert.equal(row?.tag, null)
  })

  test('stores names and tags with quotes, backslashes, braces, commas and the text NULL exactly', async () => {
    // Creates travel to PostgreSQL as array literals; these characters are the ones they escape.
    const plants = [
      { id: uniqueId(), name: 'say "hi"', tag: 'back\\slash\\' },
      { id: uniqueId(), name: '{a,b}', tag: 'NULL' },
      { id: uniqueId(), name: ' , ', tag: '"' },
    ]
    const answers = await Promise.all(plants.map((p) => s.post(p)))
    for (const [i, res] of answers.entries()) {
      const { name, tag } = plants[i] ?? {}
      assert.deepEqual(await res.json(), { name, tag })
    }
    const rows = await s.db.sql`
      select id, name, tag from plants where id = any(${plants.map((p) => String(p.id))}::int8[])`
    assert.deepEqual(
      rows.map((r) => ({ id: Number(r.id), name: r.name, tag: r.tag })).sort((a, b) => a.id - b.id),
      plants,
    )
  })

  test('ignores and does not store members other than id, name and tag, __proto__ and constructor included', async () => {
    const id = uniqueId()
    // Raw JSON text: an object literal's __proto__ would set its prototype, and
    // JSON.stringify would then send nothing hostile.
    const body = `{"id":${id},"name":"Aloe","colour":"green","__proto__":{"tag":"admin","name":"x"},"constructor":{"prototype":{"tag":"y"}}}`
    assert.match(body, /"__proto__":\{"tag":"admin"/)
    const res = await s.post(body)
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), { name: 'Aloe' })
    const rows = await s.db.sql`select name, tag from plants where id = ${id}`
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      [{ name: 'Aloe', tag: null }],
    )
    assert.equal(({} as Record<string, unknown>).tag, undefined)
  })

  test('records the name of the token that created the row in created_by', async () => {
    const token = await s.newToken(`creator-${uniqueId()}`)
    const id = uniqueId()
    await s.post({ id, name: 'Cactus' }, { token })
    const [row] = await s.db.sql`select created_by from plants where id = ${id}`
    assert.match(String(row?.created_by), /^creator-/)
  })

  for (const literal of ['-9223372036854775808', '9223372036854775807', '9007199254740993', '0']) {
    test(`keeps the id ${literal} exactly, without rounding`, async () => {
      await s.db.sql`delete from plants where id = ${literal}::int8`
      const res = await s.post(`{"id":${literal},"name":"exact ${literal}"}`)
      assert.equal(res.status, 200)
      const rows = await s.db.sql`select id::text from plants where name = ${`exact ${literal}`}`
      assert.deepEqual(
        rows.map((r) => r.id),
        [literal],
      )
    })
  }

  test('counts name length in code points, as char_length does: 200 emoji fit', async () => {
    const id = uniqueId()
    const name = '🌵'.repeat(200)
    const res = await s.post({ id, name, tag: '🌱'.repeat(100) })
    assert.equal(res.status, 200)
    const [row] = await s.db
      .sql`select char_length(name) as n, char_length(tag) as t from plants where id = ${id}`
    assert.deepEqual({ ...row }, { n: 200, t: 100 })
  })

  test('accepts a charset=utf-8 content type in any case', async () => {
    const res = await s.post(
      { id: uniqueId(), name: 'Ivy' },
      { headers: { 'content-type': 'Application/JSON; Charset=UTF-8' } },
    )
    assert.equal(res.status, 200)
  })

  test('sends the 200 only after the row is committed: none while the insert is held by a lock, and another connection sees the row as soon as it comes', async () => {
    const id = uniqueId()
    const unlock = await holdPlantsLock(s.db.sql)
    let answered: string | undefined
    const logged = s.logs.length
    const answer = s.post({ id, name: 'Basil' }).then((res) => {
      // What the service said meanwhile tells why, should an answer leave too early.
      answered = `${res.status}; log: ${JSON.stringify(s.logs.slice(logged))}`
      return res
    })
    try {
      // Held for a while: the statement waits for the lock, so nothing is committed and no
      // answer may leave.
      await sleep(1000)
      assert.equal(answered, undefined, `answered ${answered} while the lock was held`)
      assert.equal((await s.db.sql`select 1 from plants where id = ${id}`).length, 0)
    } finally {
      await unlock()
    }
    const res = await answer
    assert.equal(res.status, 200)
    assert.equal((await s.db.sql`select 1 from plants where id = ${id}`).length, 1)
  })
})
