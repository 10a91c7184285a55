import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { runMain } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'
import { startOtlpReceiver } from './helpers/otlp-receiver.ts'
import { startServiceProcess, tokenFor } from './helpers/process.ts'
import { within } from './helpers/wait.ts'

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

  for (const protocol of ['http/protobuf', 'http/json'])
    test(`spans over OTLP (${protocol}) under Deno: a create's request span continues the caller's trace, its statement's span links it, and the rest are sent at SIGTERM`, async () => {
      const db = await createTestDatabase({ after })
      const receiver = await startOtlpReceiver({ after })
      const service = await startServiceProcess(
        'deno',
        {
          DATABASE_URL: db.url,
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
          OTEL_BSP_SCHEDULE_DELAY: '50',
        },
        { after },
      )
      const token = await tokenFor(db.sql, service.base, 'deno-spans')
      const caller = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
      const created = await fetch(`${service.base}/plants`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          traceparent: caller,
        },
        body: '{"id":1,"name":"Traced fern"}',
      })
      assert.equal(created.status, 200)
      const spanId = (created.headers.get('traceparent') ?? '').split('-')[2]
      await within(10_000, async () => receiver.spans().some((s) => s.spanId === spanId))
      const request = receiver.spans().find((s) => s.spanId === spanId)
      assert.equal(request?.traceId, '4bf92f3577b34da6a3ce929d0e0e4736')
      assert.equal(request?.parentSpanId, '00f067aa0ba902b7')
      assert.equal(request?.name, 'POST /plants')
      await within(10_000, async () =>
        receiver.spans().some((s) => s.links.some((l) => l.spanId === spanId)),
      )
      service.child.kill('SIGTERM')
      assert.equal(await service.exited, 0)
      assert.ok(receiver.exports.length > 0)
      assert.ok(
        receiver.exports.every((e) =>
          e.contentType.startsWith(
            protocol === 'http/json' ? 'application/json' : 'application/x-protobuf',
          ),
        ),
      )
      assert.equal(receiver.spans()[0]?.resource['service.name'], 'plant-store')
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
