import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createTestDatabase } from './helpers/database.ts'

// patches/postgres+3.4.9.patch makes the driver's Result (src/result.js) keep what PostgreSQL
// said of a statement (count, command, columns, statement, state) in private fields behind
// accessors of the class, instead of five properties defined on each result as it is made: that
// definition ran for every statement, between its answer and its promise's settling
// (patches/README.md; BENCHMARKS.md, "Both paths against Fastify + pg's, and the driver's
// Result"). What a caller sees must not change.
describe("the postgres driver's results, as Node loads it, against a real PostgreSQL", () => {
  test('a result says what PostgreSQL said of its statement, and lists and serializes as its rows alone', async () => {
    const db = await createTestDatabase({ after })
    const inserted = await db.sql<{ id: string }[]>`
      insert into plants (id, name, tag, created_by)
      values (1, 'Fern', null, 'test'), (2, 'Ivy', 'green', 'test')
      returning id::text`
    assert.equal(inserted.count, 2)
    assert.equal(inserted.command, 'INSERT')
    assert.deepEqual(
      inserted.columns.map((c) => c.name),
      ['id'],
    )
    assert.match(inserted.statement.string, /insert into plants/)
    assert.ok(Array.isArray(inserted))
    assert.deepEqual(Object.keys(inserted), ['0', '1'])
    assert.equal(JSON.stringify(inserted), '[{"id":"1"},{"id":"2"}]')
    assert.deepEqual([...inserted], [{ id: '1' }, { id: '2' }])

    const read = await db.sql`select name from plants where id = 3`
    assert.equal(read.count, 0)
    assert.equal(read.command, 'SELECT')
    assert.equal(read.length, 0)
    // Each statement has a result of its own.
    assert.notEqual(read, inserted)
    assert.equal(inserted.count, 2)
  })

  test("a result defines no properties of its own beyond its rows: the statement's fields are its class's", async () => {
    const db = await createTestDatabase({ after })
    const result = await db.sql`select 1 as one`
    assert.deepEqual(Object.getOwnPropertyNames(result), ['0', 'length'])
    // Published, each result got five properties of its own (`Object.defineProperties`) as it
    // was made: 1.3 to 2.1 µs of CPU a statement in a loop, 2.9 to 9.4 µs made once a millisecond.
    for (const field of ['count', 'state', 'command', 'columns', 'statement']) {
      assert.equal(Object.hasOwn(result, field), false, `${field} is a property of the result`)
    }
    assert.equal(result.count, 1)
  })
})
