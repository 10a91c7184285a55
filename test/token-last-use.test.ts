import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

const s = await startTestServer({ after })

async function lastUsed(name: string): Promise<Date | null> {
  const [row] = await s.db.sql<{ at: Date | null }[]>`
    select last_used_at as at from api_tokens where name = ${name}`
  return row?.at ?? null
}

describe('when a token was last used', () => {
  test('a use is recorded within a second, at the time of the request', async () => {
    const name = `used-${uniqueId()}`
    const token = await s.newToken(name)
    assert.equal(await lastUsed(name), null)
    const before = Date.now()
    assert.equal((await s.post({ id: uniqueId(), name: 'used' }, { token })).status, 200)
    const after = Date.now()
    await within(1000, async () => (await lastUsed(name)) !== null)
    const at = (await lastUsed(name))?.getTime() ?? 0
    assert.ok(at >= before - 5 && at <= after + 5, `${at} not in ${before}..${after}`)
  })

  test('instances using one token write its last use at most once per interval between them, and LAST USED is never staler than that', async () => {
    // Two instances that write at most once a second (10 minutes in production).
    const every = 1000
    const a = await startTestServer({ after }, { db: s.db, lastUseEveryMs: every })
    const b = await startTestServer({ after }, { db: s.db, lastUseEveryMs: every })
    const name = `shared-${uniqueId()}`
    const token = await a.newToken(name)
    await within(
      1000,
      async () => (await b.post({ id: uniqueId(), name: 'b' }, { token })).status === 200,
    )
    // Every value written, as the database saw it.
    await s.db.sql.unsafe(`
      create table if not exists last_use_writes (name text, at timestamptz);
      create or replace function count_last_use() returns trigger language plpgsql as $$
      begin insert into last_use_writes values (new.name, new.last_used_at); return null; end $$;
      create or replace trigger count_last_use after update of last_used_at on api_tokens
        for each row when (old.last_used_at is distinct from new.last_used_at)
        execute function count_last_use();`)
    let lastRequest = 0
    const until = Date.now() + 4500
    while (Date.now() < until) {
      const answers = await Promise.all(
        [a, b, a, b].map((x) => x.post({ id: uniqueId(), name: 'busy' }, { token })),
      )
      lastRequest = Date.now()
      assert.deepEqual(
        answers.map((r) => r.status),
        [200, 200, 200, 200],
      )
    }
    await new Promise((done) => setTimeout(done, 500))
    const writes = (
      await s.db.sql<
        { at: Date }[]
      >`select at from last_use_writes where name = ${name} order by at`
    ).map((w) => w.at.getTime())
    assert.ok(writes.length >= 3, `only ${writes.length} writes in 4.5 s`)
    for (let i = 1; i < writes.length; i++)
      assert.ok((writes[i] ?? 0) - (writes[i - 1] ?? 0) >= every, `writes ${writes.join(', ')}`)
    const shown = (await lastUsed(name))?.getTime() ?? 0
    assert.ok(shown >= lastRequest - every - 50, `LAST USED ${lastRequest - shown} ms stale`)
    await s.db.sql.unsafe('drop trigger count_last_use on api_tokens')
  })

  test('a write of the last use that hangs and then fails never delays or fails a create; it is logged and tried again later', async () => {
    const name = `unrecorded-${uniqueId()}`
    const token = await s.newToken(name)
    await s.db.sql.unsafe(`
      create or replace function refuse_last_use() returns trigger language plpgsql as $$
      begin perform pg_sleep(4); raise exception 'last use refused for the test'; end $$;
      create or replace trigger refuse_last_use before update of last_used_at on api_tokens
        for each row execute function refuse_last_use();`)
    after(() => s.db.sql.unsafe('drop trigger if exists refuse_last_use on api_tokens'))
    const res = await s.post({ id: uniqueId(), name: 'unhindered' }, { token })
    assert.equal(res.status, 200)
    // The write of its last use (which takes 4 s) is seen running after the create was answered:
    // the answer did not wait for it. It starts just after the answer, so it is looked for, and
    // told from the token loads (which read last_used_at too) by its update.
    await within(3500, async () => {
      const running = await s.db.sql`
        select 1 from pg_stat_activity
        where state = 'active' and query like '%update api_tokens t set last_used_at%'
          and pid <> pg_backend_pid()`
      return running.length === 1
    })
    for (let i = 0; i < 5; i++)
      assert.equal((await s.post({ id: uniqueId(), name: 'meanwhile' }, { token })).status, 200)
    await within(8000, async () =>
      s.logs.some(
        (l) =>
          l.message === 'could not record when tokens were last used' &&
          String(l.error).includes('last use refused'),
      ),
    )
    assert.equal(await lastUsed(name), null)
    assert.equal((await s.post({ id: uniqueId(), name: 'after' }, { token })).status, 200)
    await s.db.sql.unsafe('drop trigger refuse_last_use on api_tokens')
    // A use after the pause that follows a failure (10 s) writes it.
    await within(15_000, async () => {
      await s.post({ id: uniqueId(), name: 'later' }, { token })
      return (await lastUsed(name)) !== null
    })
  })
})
