import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { measure } from '../bench/driver-gc.ts'
import { createTestDatabase } from './helpers/database.ts'

// patches/postgres+3.4.9.patch keeps a query's resolving functions out of closures on the query
// (src/query.js): with them there, each statement's objects survived young-generation
// collections, a third of what the driver allocates, and made each collection 2 to 4 ms
// (patches/README.md; BENCHMARKS.md, "The driver and the young generation").
describe("the postgres driver's statements, as Node loads it, against a real PostgreSQL", () => {
  test('statements sent each from the completion of the last leave under a tenth of what they allocate to survive a young-generation collection', async () => {
    const db = await createTestDatabase({ after })
    const r = await measure(db.url, 'postgres', 'floor', { rate: 3000, seconds: 8 })
    assert.ok(r.scavenges >= 2, `only ${r.scavenges} scavenges were seen`)
    // Unpatched, about 30 % survives here; patched, under 2 %.
    assert.ok(
      r.survived < 0.1,
      `${(r.survived * 100).toFixed(1)} % of what was allocated survived a scavenge`,
    )
  })
})
