import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import postgres from 'postgres'
import { nodeUrl } from '../src/db/node.ts'
import { freePort } from '../src/db/start/embedded.ts'
import { migrationNames } from '../src/db/start/migrate.ts'
import { limits } from '../src/limits.ts'
import {
  hashInt8,
  plantsShardCount,
  shardPlacements,
  splitByPlacement,
} from '../src/plants/citus.ts'
import {
  type CitusCluster,
  citusClusterForSuite,
  citusSkip,
  migrateWithNpm,
  postPlant,
} from './helpers/citus.ts'
import { projectDir, runNpm } from './helpers/cli.ts'
import { driveCreates } from './helpers/drive.ts'
import {
  connectionsTo,
  type ServiceProcess,
  startServiceProcess,
  tokenFor,
} from './helpers/process.ts'
import { startTestServer } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

// The plant store on a real Citus cluster (docs/scaling.md, Citus): Debian's PostgreSQL 15 with
// Citus 13.2.2 built by .ci/citus.sh, a coordinator and two workers on 127.0.0.1, the commands
// run as an operator runs them. Without Citus these tests skip with one line saying how to
// enable them; in CI they never skip.

// How many migrations `migrate down` undoes to reach the one that distributes plants, itself
// included: the later ones (token lifetimes, …) come off first.
const sinceDistribution =
  migrationNames().length -
  migrationNames().findIndex((m) => m.endsWith('_distribute-plants-on-citus'))

const { missing, skip } = citusSkip('test/citus.test.ts')

const post = postPlant

test("a batch on Citus goes as one statement per worker, or per shard where a worker's part falls on at most 2 of its shards", () => {
  // Items are [shard, group]: worker 1 holds shards 0 to 3, worker 2 shards 4 to 7.
  const at = ([shard, group]: readonly [number, number]) => ({ shard, group })
  const items = [
    [0, 1],
    [1, 1],
    [0, 1],
    [4, 2],
    [5, 2],
    [6, 2],
    [4, 2],
  ] as const
  assert.deepEqual(splitByPlacement(items, at), [
    [
      [0, 1],
      [0, 1],
    ],
    [[1, 1]],
    [
      [4, 2],
      [4, 2],
      [5, 2],
      [6, 2],
    ],
  ])
  assert.deepEqual(splitByPlacement([], at), [])
})

test("another Citus node's URL keeps the user, password, database and TLS settings of DATABASE_URL, with the host and port pg_dist_node names", () => {
  const url =
    'postgres://app:s%40cret@db-1:5432,db-1-standby:5432/plants?sslmode=verify-full&target_session_attrs=read-write'
  assert.equal(
    nodeUrl(url, 'worker-2.internal:6432'),
    'postgres://app:s%40cret@worker-2.internal:6432/plants?sslmode=verify-full',
  )
  assert.equal(
    nodeUrl('postgres://app@[::1]:5432/plants', 'fd00::2:5433'),
    'postgres://app@[fd00::2]:5433/plants',
  )
})

describe('on a Citus cluster (a coordinator and two workers)', { skip }, () => {
  // The cluster lives for the whole suite.
  const clusterOf = citusClusterForSuite({ before, after }, missing, migrateWithNpm)
  let cluster: CitusCluster
  before(() => {
    cluster = clusterOf()
  })

  test('npm run migrate on an empty coordinator makes plants distributed by id and leaves api_tokens local; down past the distribution and up again keep it distributed', async () => {
    const distributed = async () =>
      (
        await cluster.sql<{ table: string; column: string }[]>`
          select logicalrelid::text as table, column_to_column_name(logicalrelid, partkey) as column
          from pg_dist_partition`
      ).map((r) => `${r.table}:${r.column}`)
    assert.deepEqual(await distributed(), ['plants:id'])
    const down = await runNpm('migrate', ['down', String(sinceDistribution)], {
      DATABASE_URL: cluster.coordinator.url,
    })
    assert.equal(down.code, 0, down.stderr)
    assert.deepEqual(await distributed(), [], 'undoing the distribution makes plants local again')
    const up = await runNpm('migrate', [], { DATABASE_URL: cluster.coordinator.url })
    assert.equal(up.code, 0, up.stderr)
    assert.deepEqual(await distributed(), ['plants:id'])
  })

  test("npm run migrate distributes plants into 2 shards per worker, or into the DBA's citus.shard_count where it is set", async () => {
    const env = { DATABASE_URL: cluster.coordinator.url }
    const shards = async () =>
      (
        await cluster.sql<{ nodeport: number; n: number }[]>`
          select nodeport, count(*)::int as n from citus_shards
          where table_name = 'plants'::regclass group by nodeport order by nodeport`
      ).map((r) => r.n)
    assert.deepEqual(await shards(), [2, 2])
    assert.equal(
      await plantsShardCount(cluster.sql),
      4,
      'the count the service prints for a local plants',
    )
    await cluster.sql`alter database plants set citus.shard_count = 6`
    try {
      assert.equal((await runNpm('migrate', ['down', String(sinceDistribution)], env)).code, 0)
      assert.equal((await runNpm('migrate', [], env)).code, 0)
      assert.deepEqual(await shards(), [3, 3])
    } finally {
      await cluster.sql`alter database plants reset citus.shard_count`
    }
    assert.equal((await runNpm('migrate', ['down', String(sinceDistribution)], env)).code, 0)
    assert.equal((await runNpm('migrate', [], env)).code, 0)
    assert.deepEqual(await shards(), [2, 2])
  })

  test('npm start with DATABASE_URL naming a worker: it says so, migrates and reads tokens through the coordinator, makes no table on the worker, and holds the contract beside instances on the other worker and on the coordinator', async () => {
    const worker = cluster.workers[0]
    assert.ok(worker)
    const onWorker = await startServiceProcess('node', { DATABASE_URL: worker.url }, { after })
    const roleLine = onWorker.lines.find((l) => l.citus === 'worker')
    assert.deepEqual(
      { message: roleLine?.message, through: roleLine?.through },
      {
        message:
          'this server is a Citus worker: creates go straight to the worker that holds their row; migrations, tokens and their notifications go to the coordinator',
        through: `the coordinator at 127.0.0.1:${cluster.coordinator.port}`,
      },
    )
    const onCoordinator = await startServiceProcess(
      'node',
      { DATABASE_URL: cluster.coordinator.url },
      { after },
    )
    assert.ok(onCoordinator.lines.some((l) => l.citus === 'coordinator'))
    // A token made through the worker's URL is made on the coordinator, and reaches both.
    const made = await runNpm('token', ['create', 'through-worker'], { DATABASE_URL: worker.url })
    assert.equal(made.code, 0, made.stderr)
    const token = made.stdout.trim()
    for (const base of [onWorker.base, onCoordinator.base])
      await within(
        1000,
        async () => (await post(base, token, { id: 1, name: 'probe' })).status !== 401,
      )
    assert.equal(
      ((await (await fetch(`${onWorker.base}/readyz`)).json()) as { status: string }).status,
      'ready',
    )
    // The contract through the worker: create, retry, 40009, ids at ±2^63.
    const id = 7_100_000_001
    assert.equal((await post(onWorker.base, token, { id, name: 'fern' })).status, 200)
    assert.equal((await post(onCoordinator.base, token, { id, name: 'fern' })).status, 200)
    const conflict = await post(onWorker.base, token, { id, name: 'moss' })
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)
    for (const edge of ['9223372036854775807', '-9223372036854775808'])
      assert.equal((await post(onWorker.base, token, `{"id":${edge},"name":"edge"}`)).status, 200)
    // One winner of a race split across instances on both workers and on the coordinator.
    const second = cluster.workers[1]
    assert.ok(second)
    const onSecond = await startServiceProcess('node', { DATABASE_URL: second.url }, { after })
    await within(
      1000,
      async () => (await post(onSecond.base, token, { id: 1, name: 'probe' })).status === 200,
    )
    const bases = [onWorker.base, onSecond.base, onCoordinator.base]
    for (const raced of [7_100_000_002, 7_100_000_003, -7_100_000_004]) {
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          post(bases[i % 3] ?? '', token, { id: raced, name: `racer ${i}` }),
        ),
      )
      const statuses = answers.map((r) => r.status)
      assert.equal(statuses.filter((x) => x === 200).length, 1, JSON.stringify(statuses))
      assert.equal(statuses.filter((x) => x === 400).length, 29, JSON.stringify(statuses))
    }
    // The worker holds shards and metadata only: no table of the service's own.
    const w = postgres(worker.url, { max: 1, onnotice: () => {} })
    after(() => w.end())
    const [local] = await w<{ migrations: string | null; tokens: string | null }[]>`
      select to_regclass('pgmigrations')::text as migrations, to_regclass('api_tokens')::text as tokens`
    assert.deepEqual(local, { migrations: null, tokens: null })
    // A revocation made on the coordinator reaches the worker's instance within 1 s.
    assert.equal(
      (
        await runNpm('token', ['revoke', 'through-worker'], {
          DATABASE_URL: cluster.coordinator.url,
        })
      ).code,
      0,
    )
    await within(
      1000,
      async () => (await post(onWorker.base, token, { id: 3, name: 'x' })).status === 401,
    )
  })

  test('an instance on a worker sends each create straight to the worker that holds its row: each worker runs the statements of its own rows, the coordinator none, and every create is stored', async () => {
    const [own, other] = cluster.workers
    assert.ok(own && other)
    const s = await startServiceProcess('node', { DATABASE_URL: own.url }, { after })
    const token = await tokenFor(cluster.sql, s.base, 'straight-to-the-shard')
    const pools = [...cluster.workers, cluster.coordinator].map((n) =>
      postgres(n.url, { max: 1, onnotice: () => {} }),
    )
    after(() => Promise.all(pools.map((p) => p.end())))
    // The distributed statements each node ran (the workers', then the coordinator's). (Its
    // connections to other nodes are no measure: Citus's maintenance daemon reuses one about
    // every second, creates or not.)
    const counters = () =>
      Promise.all(
        pools.map(async (sql) => {
          const [c] = await sql<{ statements: number }[]>`
            select (query_execution_single_shard + query_execution_multi_shard)::int as statements
            from citus_stat_counters where name = current_database()`
          return c ?? { statements: Number.NaN }
        }),
      )
    const before = await counters()
    const ids = Array.from({ length: 200 }, (_, i) => 9_300_000_000 + i * 104_729)
    for (let wave = 0; wave < ids.length; wave += 25) {
      const statuses = await Promise.all(
        ids
          .slice(wave, wave + 25)
          .map((id) => post(s.base, token, { id, name: `straight ${id}` }).then((r) => r.status)),
      )
      assert.deepEqual(new Set(statuses), new Set([200]), JSON.stringify(statuses))
    }
    const now = await counters()
    cluster.workers.forEach((w, i) => {
      const was = before[i]
      const is = now[i]
      assert.ok(was && is)
      // A statement sent on from another node reaches a worker as a plain statement on its
      // shard, which Citus does not count: only one the instance sent it is counted here.
      assert.ok(
        is.statements > was.statements,
        `the worker on ${w.port} ran no statement of its own: its rows were sent through another node`,
      )
    })
    // The coordinator is off the create path: not one distributed statement.
    assert.equal(now[2]?.statements, before[2]?.statements)
    const [stored] = await cluster.sql<{ n: number }[]>`
      select count(*)::int as n from plants where id = any(${ids.map(String)}::int8[])`
    assert.equal(stored?.n, ids.length)
    assert.ok(
      s.lines.some(
        (l) =>
          l.message === 'creates of a Citus group go straight to its primary' &&
          l.node === `127.0.0.1:${other.port}`,
      ),
      JSON.stringify(s.lines.map((l) => l.message)),
    )
  })

  test('an instance on a worker holds at most 3 connections on the coordinator and 1 on each worker under load, as docs/scaling.md counts them', async () => {
    const worker = cluster.workers[0]
    assert.ok(worker)
    const s = await startServiceProcess('node', { DATABASE_URL: worker.url }, { after })
    const pid = s.child.pid
    assert.ok(pid)
    const token = await tokenFor(cluster.sql, s.base, 'counted-connections')
    const nodes = [cluster.coordinator, ...cluster.workers]
    const most = nodes.map(() => 0)
    const sample = () =>
      nodes.forEach((n, i) => {
        most[i] = Math.max(most[i] ?? 0, connectionsTo(pid, n.port))
      })
    const sampler = setInterval(sample, 25)
    const drive = driveCreates(s.base, token, { concurrency: 8 })
    // Token loads on the pool beside the creates: a notification, then a reload, twice (each
    // awaited: tokenFor returns once the service takes the new token).
    for (const name of ['counted-a', 'counted-b']) await tokenFor(cluster.sql, s.base, name)
    // Under load for at least 100 creates, however busy the machine.
    await within(30_000, async () => (drive.statuses.get(200) ?? 0) > 100)
    await drive.stop()
    clearInterval(sampler)
    sample()
    assert.ok((drive.statuses.get(200) ?? 0) > 100, JSON.stringify([...drive.statuses]))
    const [coordinator, ...workers] = most
    // The token pool (at most 2) and the LISTEN; no statement slot: the creates go to workers.
    assert.ok(
      coordinator !== undefined && coordinator >= 1 && coordinator <= 3,
      `coordinator: ${coordinator}`,
    )
    // Its own worker: the slot and the reader of pg_dist_node's primaries.
    assert.deepEqual(workers, [2, 1], 'one statement slot on each worker, one reader on its own')
    const doc = readFileSync(join(projectDir, 'docs', 'scaling.md'), 'utf8')
    assert.match(doc, /\| the coordinator \| 3 × M /)
    assert.match(doc, /\| each worker \| M \+ the instances on it \|/)
  })

  test('WORKERS=2 on a worker: the primary reads the tokens on the coordinator, and both workers take a new token and store creates', async () => {
    const worker = cluster.workers[1]
    assert.ok(worker)
    const s = await startServiceProcess(
      'node',
      { DATABASE_URL: worker.url, WORKERS: '2' },
      { after },
    )
    const token = await tokenFor(cluster.sql, s.base, 'two-processes-on-a-worker')
    const statuses = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        post(s.base, token, { id: 9_410_000_000 + i, name: 'two processes' }).then((r) => r.status),
      ),
    )
    assert.deepEqual(new Set(statuses), new Set([200]), JSON.stringify(statuses))
    assert.ok(!s.lines.some((l) => l.level === 'error'), JSON.stringify(s.lines))
  })

  test('an instance on a worker keeps one limit of creates waiting, whichever workers they wait for: past it, queue_full', async (t) => {
    const worker = cluster.workers[0]
    assert.ok(worker)
    const maxQueued = 4
    const server = await startTestServer(t, {
      db: { url: worker.url, sql: cluster.sql },
      batchLimits: { maxBatch: 10, maxInFlight: 1, maxQueued },
    })
    const placementOf = await shardPlacements(cluster.sql)
    const ids = Array.from({ length: 40 }, (_, i) => BigInt(9_500_000_000 + i * 7919))
    assert.equal(new Set(ids.map((id) => placementOf(id).group)).size, 2, 'ids on both workers')
    // All submitted in one tick: none can have gone to a statement yet, so all wait.
    const outcomes = await Promise.all(
      ids.map((id) => server.store.create({ id, name: `queued ${id}` }, 'test')),
    )
    const refused = outcomes.filter((o) => o.kind === 'unavailable' && o.reason === 'queue_full')
    assert.equal(outcomes.length - refused.length, maxQueued, JSON.stringify(outcomes.slice(0, 6)))
    assert.ok(outcomes.every((o) => o.kind === 'created' || refused.includes(o)))
  })

  test('an instance on a worker runs one statement at a time on each worker, however many creates wait: fuller batches', async (t) => {
    const worker = cluster.workers[0]
    assert.ok(worker)
    const server = await startTestServer(t, {
      db: { url: worker.url, sql: cluster.sql },
      batchLimits: { maxBatch: 5, maxInFlight: limits.batch.maxInFlight, maxQueued: 1000 },
    })
    const placementOf = await shardPlacements(cluster.sql)
    const ids = Array.from({ length: 40 }, (_, i) => BigInt(9_600_000_000 + i * 7919))
    assert.equal(new Set(ids.map((id) => placementOf(id).group)).size, 2, 'ids on both workers')
    // Warm: both workers' repositories and connections open.
    await Promise.all(
      ids.slice(0, 8).map((id) => server.store.create({ id, name: 'warm' }, 'test')),
    )
    const rest = ids.slice(8).map((id) => server.store.create({ id, name: `waits ${id}` }, 'test'))
    let most = 0
    const sampling = setInterval(() => {
      most = Math.max(most, server.store.load().inFlight)
    }, 1)
    await Promise.all(rest)
    clearInterval(sampling)
    // 32 creates in batches of at most 5: with more statements allowed, each worker would run
    // several at once.
    assert.ok(most >= 1, 'statements were seen in flight')
    assert.ok(
      most <= cluster.workers.length,
      `one statement a worker (${cluster.workers.length}) at most: ${most} in flight`,
    )
  })

  test('an instance on a worker with DATABASE_DIRECT_URL naming the coordinator among two hosts (the first one down): it says so, is ready, takes a new token within 1 s and sends creates straight to the shards', async () => {
    const worker = cluster.workers[1]
    assert.ok(worker)
    const down = await freePort()
    const direct = `postgres://postgres@127.0.0.1:${down},127.0.0.1:${cluster.coordinator.port}/plants?target_session_attrs=read-write`
    const s = await startServiceProcess(
      'node',
      { DATABASE_URL: worker.url, DATABASE_DIRECT_URL: direct },
      { after },
    )
    const roleLine = s.lines.find((l) => l.citus === 'worker')
    assert.deepEqual(
      { message: roleLine?.message, through: roleLine?.through },
      {
        message:
          'this server is a Citus worker: creates go straight to the worker that holds their row; migrations, tokens and their notifications go to the coordinator',
        through: `DATABASE_DIRECT_URL (127.0.0.1:${down},127.0.0.1:${cluster.coordinator.port}/plants as postgres)`,
      },
    )
    assert.equal((await fetch(`${s.base}/readyz`)).status, 200)
    const made = await runNpm('token', ['create', 'through-direct-url'], {
      DATABASE_URL: cluster.coordinator.url,
    })
    assert.equal(made.code, 0, made.stderr)
    const token = made.stdout.trim()
    await within(
      1000,
      async () => (await post(s.base, token, { id: 9_400_000_001, name: 'direct' })).status === 200,
    )
    assert.ok(
      s.lines.some((l) => l.citus === 'routed'),
      JSON.stringify(s.lines.map((l) => l.message)),
    )
  })

  test('the service logs the VALUES path and holds the contract: create, retry, 40009, ids at ±2^63, one winner of a 50-way race, rows on both workers', async () => {
    const s = await startServiceProcess(
      'node',
      { DATABASE_URL: cluster.coordinator.url },
      { after },
    )
    assert.ok(
      s.lines.some((l) => String(l.message).startsWith('plants is distributed on Citus')),
      JSON.stringify(s.lines.map((l) => l.message)),
    )
    const token = await tokenFor(cluster.sql, s.base, 'citus-contract')
    const id = 7_000_000_001n
    assert.equal((await post(s.base, token, { id: Number(id), name: 'fern' })).status, 200)
    const retry = await post(s.base, token, `{"id":${id},"name":"fern"}`)
    assert.equal(retry.status, 200)
    assert.deepEqual(await retry.json(), { name: 'fern' })
    const conflict = await post(s.base, token, `{"id":${id},"name":"moss"}`)
    assert.equal(conflict.status, 400)
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)
    for (const edge of ['9223372036854775807', '-9223372036854775808']) {
      const res = await post(s.base, token, `{"id":${edge},"name":"edge"}`)
      assert.equal(res.status, 200, edge)
    }
    const [edges] = await cluster.sql<{ n: number }[]>`
      select count(*)::int as n from plants
      where id in (9223372036854775807, -9223372036854775808)`
    assert.equal(edges?.n, 2)
    // 50 creates of one id, each with another name: exactly one is stored and answered 200.
    const raced = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        post(s.base, token, `{"id":424242,"name":"racer ${i}"}`).then((r) => r.status),
      ),
    )
    assert.equal(raced.filter((x) => x === 200).length, 1, JSON.stringify(raced))
    assert.equal(raced.filter((x) => x === 400).length, 49)
    // Enough rows that both workers hold some.
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        post(s.base, token, { id: 8_000_000 + i * 7919, name: `spread ${i}` }),
      ),
    )
    const perNode = await cluster.sql<{ port: number; rows: number }[]>`
      select s.nodeport as port, sum(r.result::int)::int as rows
      from run_command_on_shards('plants', 'select count(*) from %s') r
      join citus_shards s using (shardid)
      group by s.nodeport`
    for (const w of cluster.workers) {
      const rows = perNode.find((n) => n.port === w.port)?.rows ?? 0
      assert.ok(rows > 0, `the worker on ${w.port} holds ${rows} rows: ${JSON.stringify(perNode)}`)
    }
  })

  test("the service's VALUES batch is routed per shard: Citus plans it as tasks, with no pull to the coordinator", async () => {
    const sql = cluster.sql
    const rows = [1, 2, 3].map((i) => ({
      id: String(9_100_000 + i),
      name: `planned ${i}`,
      tag: null,
      created_by: 'test',
    }))
    const plan = (
      await sql<{ 'QUERY PLAN': string }[]>`
        explain insert into plants ${sql(rows, 'id', 'name', 'tag', 'created_by')}
        on conflict (id) do nothing returning id::text`
    )
      .map((r) => r['QUERY PLAN'])
      .join('\n')
    assert.match(plan, /Citus Adaptive/)
    // One task per shard the 3 rows fall on, on the workers that hold them.
    assert.match(plan, /Task Count: [123]\n/)
    assert.doesNotMatch(plan, /pull to coordinator|intermediate/i)
    const lookup = (
      await sql<{ 'QUERY PLAN': string }[]>`
        explain select id::text, name, tag from plants
        where id = any(${rows.map((r) => r.id)}::int8[])`
    )
      .map((r) => r['QUERY PLAN'])
      .join('\n')
    assert.match(lookup, /Citus Adaptive/)
    assert.doesNotMatch(lookup, /pull to coordinator|intermediate/i)
  })

  test("the service's hash and placement of an id are Citus's own (worker_hash, get_shard_id_for_distribution_column), at the int64 edges and 500 ids at random", async () => {
    const ids = [
      '0',
      '1',
      '-1',
      '4294967296',
      '-4294967297',
      '9223372036854775807',
      '-9223372036854775808',
    ]
    for (let i = 0; i < 500; i++)
      ids.push(
        String(
          BigInt.asIntN(
            64,
            BigInt(Math.floor(Math.random() * 2 ** 53)) * 2_147_483_647n + BigInt(i),
          ),
        ),
      )
    const rows = await cluster.sql<{ id: string; hash: number; shard: string; group: number }[]>`
      select x as id, worker_hash(x::int8) as hash,
        get_shard_id_for_distribution_column('plants', x::int8)::text as shard,
        (select groupid from pg_dist_placement p
         where p.shardid = get_shard_id_for_distribution_column('plants', x::int8)) as group
      from unnest(${ids}::text[]) x`
    assert.deepEqual(
      rows.filter((r) => hashInt8(BigInt(r.id)) !== r.hash).map((r) => r.id),
      [],
    )
    // The placement the service splits batches by is Citus's own: shard and worker.
    const shards = (
      await cluster.sql<{ shardid: string }[]>`
        select shardid::text from pg_dist_shard where logicalrelid = 'plants'::regclass
        order by shardminvalue::int`
    ).map((r) => r.shardid)
    const placementOf = await shardPlacements(cluster.sql)
    assert.deepEqual(
      rows
        .filter((r) => {
          const p = placementOf(BigInt(r.id))
          return shards[p.shard] !== r.shard || p.group !== r.group
        })
        .map((r) => r.id),
      [],
    )
  })

  test('a token made and revoked with npm run token takes effect on the running service within 1 s', async () => {
    const s = await startServiceProcess(
      'node',
      { DATABASE_URL: cluster.coordinator.url },
      { after },
    )
    const env = { DATABASE_URL: cluster.coordinator.url }
    const made = await runNpm('token', ['create', 'citus-operator'], env)
    assert.equal(made.code, 0, made.stderr)
    const token = made.stdout.trim()
    const accepted = await within(1000, async () => {
      const res = await post(s.base, token, { id: 9_200_001, name: 'by token' })
      return res.status === 200
    })
    assert.ok(accepted <= 1000)
    const revoked = await runNpm('token', ['revoke', 'citus-operator'], env)
    assert.equal(revoked.code, 0, revoked.stderr)
    await within(1000, async () => {
      const res = await post(s.base, token, { id: 9_200_002, name: 'by token' })
      return res.status === 401
    })
  })

  test("the start-up warnings about wal_compression and max_wal_size ask the server that takes the writes: on a worker, the worker's own settings, not the coordinator's", async () => {
    // The coordinator set as the docs ask, the first worker left at PostgreSQL's defaults.
    const settings = async (wal: string, size: string) => {
      await cluster.sql.unsafe(`alter system set wal_compression = '${wal}'`)
      await cluster.sql.unsafe(`alter system set max_wal_size = '${size}'`)
      await cluster.sql`select pg_reload_conf()`
    }
    await settings('lz4', '8GB')
    after(() => settings('off', '1GB'))
    const worker = cluster.workers[0]
    assert.ok(worker)
    const walWarnings = (s: ServiceProcess) =>
      s.lines
        .filter((l) => /^(wal_compression|max_wal_size) is /.test(String(l.message)))
        .map(
          (l) =>
            `${String(l.message).split(':')[0]}${l.maxWalSizeMb ? ` (${l.maxWalSizeMb} MB)` : ''}`,
        )
    const onWorker = await startServiceProcess('node', { DATABASE_URL: worker.url }, { after })
    assert.deepEqual(walWarnings(onWorker), [
      'wal_compression is off',
      'max_wal_size is under 2 GB (1024 MB)',
    ])
    const onCoordinator = await startServiceProcess(
      'node',
      { DATABASE_URL: cluster.coordinator.url },
      { after },
    )
    assert.deepEqual(walWarnings(onCoordinator), [])
  })

  test('a coordinator where plants is still local: the service warns once at start with the SQL to run, serves, and sends creates to the shards within 10 s of the DBA running it', async () => {
    const admin = postgres(cluster.coordinator.url.replace(/\/plants$/, '/postgres'), {
      max: 1,
      onnotice: () => {},
    })
    await admin`create database plants_local`
    await admin.end()
    const url = cluster.coordinator.url.replace(/\/plants$/, '/plants_local')
    // Migrated before citus was installed in it: plants stays local.
    const migrated = await runNpm('migrate', [], { DATABASE_URL: url })
    assert.equal(migrated.code, 0, migrated.stderr)
    const local = postgres(url, { max: 1, onnotice: () => {} })
    await local`create extension citus`
    await local.end()
    const s = await startServiceProcess('node', { DATABASE_URL: url }, { after })
    const warnings = s.lines.filter((l) => String(l.message).startsWith('plants is a local table'))
    assert.equal(warnings.length, 1)
    const printed = String(warnings[0]?.sql)
    assert.match(printed, /;$/)
    assert.equal(warnings[0]?.withinMs, 10_000)
    // This database has no worker nodes of its own (Citus's metadata is per database): 2 shards.
    assert.match(printed, /create_distributed_table\('plants', 'id', shard_count := 2\)/)
    // The SQL it prints, run as the DBA would, distributes plants as the migration does.
    const dba = postgres(url, { max: 1, onnotice: () => {} })
    after(() => dba.end())
    await dba.unsafe(printed)
    const [shards] = await dba<{ n: number; nodes: number }[]>`
      select count(*)::int as n, count(distinct nodeport)::int as nodes
      from citus_shards where table_name = 'plants'::regclass`
    assert.equal(shards?.n, 2)
    // The running service reads the change itself, and goes on serving.
    await within(15_000, async () =>
      s.lines.some((l) => String(l.message).startsWith('plants is now distributed on Citus')),
    )
    const token = await tokenFor(dba, s.base, 'citus-local')
    const created = await fetch(`${s.base}/plants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{"id": 77, "name": "Moved"}',
    })
    assert.equal(created.status, 200, await created.text())
    const [row] = await dba<{ name: string }[]>`select name from plants where id = 77`
    assert.equal(row?.name, 'Moved')
    const again = await startServiceProcess('node', { DATABASE_URL: url }, { after })
    assert.ok(
      again.lines.some((l) => String(l.message).startsWith('plants is distributed on Citus')),
    )
  })
})
