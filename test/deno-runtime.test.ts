import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { runMain } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'
import { startServiceProcess, tokenFor } from './helpers/process.ts'

describe('the same service under Deno 2 (deno task start)', () => {
  test('creates, retries, refuses 40005, 40009 and 401, serves /docs, /metrics and traceparent, then stops cleanly on SIGTERM', async () => {
    const db = await createTestDatabase({ after })
    const service = await startServiceProcess('deno', { DATABASE_URL: db.url }, { after })
    const token = await tokenFor(db.sql, service.base, 'deno')
    const post = (body: string, auth = `Bearer ${token}`) =>
      fetch(`${service.base}/plants`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body,
      })
    const body = '{"id":9007199254740993,"name":"Deno fern","tag":"deno"}'

    const created = await post(body)
    assert.equal(created.status, 200)
    assert.deepEqual(await created.json(), { name: 'Deno fern', tag: 'deno' })
    const [row] = await db.sql`select id::text, created_by from plants`
    assert.deepEqual({ ...row }, { id: '9007199254740993', created_by: 'deno' })

    const retry = await post(body)
    assert.equal(retry.status, 200)

    const invalid = await post('{"id":1.5,"name":""}')
    assert.equal(invalid.status, 400)
    assert.equal(((await invalid.json()) as { error: number }).error, 40005)

    const conflict = await post('{"id":9007199254740993,"name":"Other"}')
    assert.equal(conflict.status, 400)
    assert.equal(((await conflict.json()) as { error: number }).error, 40009)

    const unauthorised = await post(body, 'Bearer pst_wrong')
    assert.equal(unauthorised.status, 401)
    assert.equal(
      unauthorised.headers.get('www-authenticate'),
      'Bearer realm="plants", error="invalid_token"',
    )

    const docs = await fetch(`${service.base}/docs`)
    assert.equal(docs.status, 200)
    const script = (await docs.text()).match(/src="([^"]+swagger-ui-bundle\.js)"/)?.[1]
    assert.equal((await fetch(`${service.base}/${script}`)).status, 200)
    const metrics = await fetch(`${service.base}/metrics`)
    assert.equal(metrics.status, 200)
    const exposition = await metrics.text()
    assert.match(exposition, /^plant_store_build_info\{[^}]*runtime="deno"[^}]*\} 1$/m)
    assert.match(exposition, /^plant_store_creates_total\{outcome="created"\} 1$/m)
    assert.match(
      created.headers.get('traceparent') ?? '',
      /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/,
    )

    service.child.kill('SIGTERM')
    assert.equal(await service.exited, 0)
    assert.ok(service.lines.some((l) => l.message === 'stopped'))
  })

  test('WORKERS=2 under Deno stops at start with one line: node:cluster is Node-only', async () => {
    const db = await createTestDatabase({ after })
    const run = await runMain([], { DATABASE_URL: db.url, WORKERS: '2', PORT: '0' }, 'deno')
    assert.equal(run.code, 1)
    assert.equal(
      run.stderr,
      'plant-store: WORKERS=2 needs node:cluster, which Deno does not provide; under Deno run one process (WORKERS=1) per instance\n',
    )
  })
})
