import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { followCitusPrimaries } from '../src/db/node.ts'
import { createLog } from '../src/log.ts'
import { createTestDatabase } from './helpers/database.ts'
import { within } from './helpers/wait.ts'

// What the follower reads of Citus is one relation, pg_dist_node. Here it is a table of the same
// name and columns on a plain PostgreSQL, whose rows the test changes as Citus (and Patroni in
// Citus mode) change them: a group's primary moving, or no active primary named for a while.
// A real Citus cluster follows a switchover in test/faults/citus-patroni.test.ts.

describe('Citus primaries as pg_dist_node names them', () => {
  test('a group that drops out of the active primaries keeps its last one, with one warning; a new primary is followed', async () => {
    const db = await createTestDatabase({ after })
    await db.sql.unsafe(`
      create table pg_dist_node (groupid int, nodename text, nodeport int, noderole text, isactive bool);
      insert into pg_dist_node values
        (0, 'coordinator', 5432, 'primary', true),
        (1, 'worker-1', 5432, 'primary', true),
        (2, 'worker-2', 5432, 'primary', true),
        (2, 'worker-2b', 5432, 'secondary', true);`)
    const lines: Record<string, unknown>[] = []
    const log = createLog('info', (line) => lines.push(JSON.parse(line) as Record<string, unknown>))
    const primaries = await followCitusPrimaries(db.url, log, 50)
    after(() => primaries.stop())
    const changes: string[] = []
    primaries.onChange((group, node, was) => changes.push(`${group}: ${was} -> ${node}`))
    assert.equal(primaries.of(2), 'worker-2:5432')

    // A failover under way: the old primary is no longer active, no new one named yet.
    await db.sql`update pg_dist_node set isactive = false where groupid = 2 and noderole = 'primary'`
    const warned = (l: Record<string, unknown>) =>
      l.level === 'warn' &&
      /no active primary for a Citus group/.test(String(l.message)) &&
      l.group === 2
    await within(2000, () => lines.some(warned))
    // Several reads later (the table's scans, as PostgreSQL counts them), still the last one,
    // and still one warning.
    const scans = async () =>
      Number(
        (
          await db.sql<{ n: string }[]>`
            select seq_scan::text as n from pg_stat_user_tables where relname = 'pg_dist_node'`
        )[0]?.n ?? 0,
      )
    const before = await scans()
    const reads = lines.length
    await within(10_000, async () => (await scans()) >= before + 3)
    assert.equal(primaries.of(2), 'worker-2:5432')
    assert.equal(primaries.all().get(2), 'worker-2:5432')
    assert.equal(lines.filter(warned).length, 1, JSON.stringify(lines.slice(reads)))
    assert.equal(primaries.of(1), 'worker-1:5432')

    // The new primary named: followed, and told to the listeners once.
    await db.sql`
      update pg_dist_node set noderole = 'primary', isactive = true where nodename = 'worker-2b'`
    await within(2000, () => primaries.of(2) === 'worker-2b:5432')
    assert.deepEqual(changes, ['2: worker-2:5432 -> worker-2b:5432'])
    assert.equal(primaries.of(3), undefined, 'a group never named has none')
  })
})
