import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { createTestDatabase } from './helpers/database.ts'
import { driveCreates, underWay } from './helpers/drive.ts'
import { startServiceProcess, tokenFor } from './helpers/process.ts'
import { sleep } from './helpers/wait.ts'

// A create's objects are young garbage once it is answered. Two object spreads made for every
// request (the context handed to the route, the create's outcome) survived two young-generation
// collections on Node 20 and were promoted, about 300 bytes a create where the bare node:http
// server promotes none: twice as long a collection, and a full one every few seconds
// (BENCHMARKS.md, "What survives a scavenge"). This counts what the service's collections
// promote while creates run, from V8's own trace.
describe('the objects of a create, in the service as npm start runs it, against a real PostgreSQL', () => {
  test('under steady load the service promotes under 64 bytes a create to the old generation', async () => {
    const db = await createTestDatabase({ after })
    // Standard output carries the log and V8's trace of each collection; each scavenge's line is
    // kept if it came while the counted creates ran.
    let counting = false
    const promoted: number[] = []
    const { base } = await startServiceProcess(
      'node',
      { DATABASE_URL: db.url },
      { after },
      {
        nodeFlags: ['--trace-gc-nvp'],
        otherLine: (line) => {
          if (counting && / gc=s /.test(line))
            promoted.push(Number(/ promoted=(\d+)/.exec(line)?.[1] ?? Number.NaN))
        },
      },
    )
    const token = await tokenFor(db.sql, base, 'gc')
    const drive = driveCreates(base, token, { concurrency: 8, pauseMs: 0 })
    after(() => drive.stop())
    // Past the first creates (code still being optimised), 6 s counted.
    await underWay(drive, 2000)
    counting = true
    const from = drive.acknowledged.length
    await sleep(6000)
    counting = false
    const creates = drive.acknowledged.length - from
    await drive.stop()
    assert.ok(
      promoted.length >= 3,
      `only ${promoted.length} scavenges in 6 s of ${creates} creates`,
    )
    assert.ok(
      promoted.every((n) => Number.isFinite(n)),
      'each scavenge line says what it promoted',
    )
    const perCreate = promoted.reduce((a, b) => a + b, 0) / creates
    assert.ok(
      perCreate < 64,
      `${perCreate.toFixed(0)} bytes promoted a create (${promoted.length} scavenges, ${creates} creates)`,
    )
  })
})
