import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { promisify } from 'node:util'
import { Validator } from '@seriousme/openapi-schema-validator'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { migrate } from '../src/db/start/migrate.ts'
import { errorTable } from '../src/http/errors.ts'
import { projectDir } from './helpers/cli.ts'
import { quietLog } from './helpers/database.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'

const s = await startTestServer({ after })
const served = await fetch(`${s.base}/openapi.json`)
const doc = (await served.json()) as {
  openapi: string
  info: { description: string }
  paths: Record<string, Record<string, { responses: Record<string, unknown> }>>
  components: Record<string, unknown>
}

const run = promisify(execFile)

const ajv = new Ajv2020({ strict: false, allErrors: true })
ajv.addFormat('int32', {
  type: 'number',
  validate: (n: number) => Number.isInteger(n) && Math.abs(n) <= 2 ** 31,
})
ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) })
ajv.addSchema(doc, 'openapi.json')

const pointer = (...parts: string[]) =>
  parts.map((p) => p.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')

/** Checks a real response against the document: status, Error or success schema, headers. */
async function conforms(res: Response, path: string, method: string): Promise<number | undefined> {
  const status = String(res.status)
  const operation = doc.paths[path]?.[method]
  const declared = operation?.responses[status] !== undefined
  // 404 and 405 belong to no operation: the document describes them once, as Error bodies.
  const schema = declared
    ? `openapi.json#/paths/${pointer(path)}/${method}/responses/${status}/content/application~1json/schema`
    : 'openapi.json#/components/schemas/Error'
  const body = method === 'head' ? undefined : await res.json()
  assert.ok(
    declared || res.status === 404 || res.status === 405,
    `${method} ${path}: ${status} is not documented`,
  )
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/)
  assert.ok(res.headers.get('x-request-id'))
  const validate = ajv.getSchema(schema)
  assert.ok(validate, `no schema at ${schema}`)
  if (body !== undefined)
    assert.ok(
      validate(body),
      `${method} ${path} ${status}: ${JSON.stringify(body)} ${ajv.errorsText(validate.errors)}`,
    )
  return (body as { error?: number } | undefined)?.error
}

describe('the OpenAPI document at GET /openapi.json', () => {
  test('is a valid OpenAPI 3.1 document (independent validator)', async () => {
    assert.equal(served.status, 200)
    assert.equal(doc.openapi, '3.1.0')
    const result = await new Validator().validate(doc as never)
    assert.equal(result.valid, true, JSON.stringify(result.errors))
  })

  test('states every error code of the table under its own status, and none under another', () => {
    // Where each code is listed: the status of each response whose schema narrows `error` to it.
    const listedUnder = new Map<number, Set<string>>()
    for (const item of Object.values(doc.paths)) {
      for (const operation of Object.values(item as Record<string, unknown>)) {
        const responses = (operation as { responses?: Record<string, unknown> }).responses ?? {}
        for (const [status, response] of Object.entries(responses)) {
          const schema = (response as { content?: Record<string, { schema?: unknown }> }).content?.[
            'application/json'
          ]?.schema as { allOf?: { properties?: { error?: { enum?: number[] } } }[] } | undefined
          for (const part of schema?.allOf ?? []) {
            for (const code of part.properties?.error?.enum ?? []) {
              const statuses = listedUnder.get(code) ?? new Set()
              statuses.add(status)
              listedUnder.set(code, statuses)
            }
          }
        }
      }
    }
    const intro = doc.info.description
    for (const [code, { status }] of Object.entries(errorTable)) {
      const statuses = listedUnder.get(Number(code))
      if (statuses === undefined) {
        // 404 and 405 have no operation of their own: the introduction states them.
        assert.ok(
          intro.includes(`\`${status}\` / ${code}`),
          `code ${code} (${status}) is not stated`,
        )
      } else {
        assert.deepEqual(
          [...statuses],
          [String(status)],
          `code ${code} is listed under ${[...statuses]}`,
        )
      }
      assert.ok(intro.includes(`| ${code} |`), `code ${code} is missing from the intro table`)
    }
  })

  test('renders the int64 id as integer/int64, the lengths, the 16 KiB limit, the headers and bearer security', () => {
    const d = doc as unknown as {
      components: {
        schemas: Record<
          string,
          { properties: Record<string, Record<string, unknown>>; required: string[] }
        >
        securitySchemes: Record<string, unknown>
      }
      security: unknown
    }
    const np = d.components.schemas.NewPlant
    assert.deepEqual([np?.properties.id?.type, np?.properties.id?.format], ['integer', 'int64'])
    assert.deepEqual([np?.properties.name?.minLength, np?.properties.name?.maxLength], [1, 200])
    assert.deepEqual([np?.properties.tag?.minLength, np?.properties.tag?.maxLength], [1, 100])
    assert.deepEqual(np?.required, ['id', 'name'])
    assert.deepEqual(d.security, [{ bearerAuth: [] }])
    assert.deepEqual(d.components.securitySchemes.bearerAuth, {
      ...(d.components.securitySchemes.bearerAuth as object),
      type: 'http',
      scheme: 'bearer',
    })
    const text = JSON.stringify(doc)
    for (const needle of [
      '16384 bytes',
      'WWW-Authenticate',
      'Retry-After',
      'X-Request-Id',
      'Allow',
      'idempotency key',
      '/healthz',
      '/readyz',
      '/openapi.json',
    ]) {
      assert.ok(text.includes(needle), `${needle} is missing`)
    }
  })

  test('real responses of POST /plants, success and every error, validate against the document', async () => {
    const seen = new Set<number>()
    const check = async (res: Response) => {
      const code = await conforms(res, '/plants', 'post')
      if (code !== undefined) seen.add(code)
    }
    const id = uniqueId()
    await check(await s.post({ id, name: 'Doc', tag: 'd' }))
    await check(await s.post({ id, name: 'Doc', tag: 'd' }))
    await check(await s.post({ id, name: 'Other' }))
    await check(await s.post(''))
    await check(
      await s.post({ id: uniqueId(), name: 'x' }, { headers: { 'content-type': 'text/plain' } }),
    )
    await check(await s.post(`{"id":1,"name":"${'x'.repeat(17000)}"}`))
    await check(await s.post('{"id":'))
    await check(await s.post('{"id":1.5,"name":""}'))
    await check(await s.post({ id: uniqueId(), name: 'x' }, { token: 'a b' }))
    const none = await fetch(`${s.base}/plants`, { method: 'POST', body: '{}' })
    await check(none)
    await check(await s.post({ id: uniqueId(), name: 'x' }, { token: 'pst_nope' }))
    await s.db.sql.unsafe(`
      create function explode() returns trigger language plpgsql as $$ begin raise exception 'boom'; end $$;
      create trigger explode before insert on plants for each row when (new.name = 'explode') execute function explode();`)
    await check(await s.post({ id: uniqueId(), name: 'explode' }))
    assert.deepEqual(
      [...seen].sort(),
      [40001, 40002, 40003, 40004, 40005, 40009, 40010, 40101, 40102, 50001],
    )
  })

  test('real responses of the other paths validate against the document, 404, 405 and 503 included', async () => {
    await conforms(await fetch(`${s.base}/healthz`), '/healthz', 'get')
    await conforms(await fetch(`${s.base}/readyz`), '/readyz', 'get')
    await conforms(await fetch(`${s.base}/openapi.json`), '/openapi.json', 'get')
    assert.equal(await conforms(await fetch(`${s.base}/nowhere`), '/nowhere', 'get'), 40401)
    assert.equal(await conforms(await fetch(`${s.base}/plants`), '/plants', 'get'), 40501)
    await migrate(s.db.url, quietLog, 'down', 1)
    after(() => migrate(s.db.url, quietLog))
    assert.equal(await conforms(await fetch(`${s.base}/readyz`), '/readyz', 'get'), 50301)
  })

  test('reads the same in every tool: errors narrowed with allOf, examples, operationId and tags, a relative server first', () => {
    type Operation = {
      operationId?: string
      tags?: string[]
      responses: Record<string, { content?: Record<string, { schema: unknown }> }>
    }
    const d = doc as unknown as {
      info: { contact?: unknown }
      servers: { url: string; variables?: unknown }[]
      paths: Record<string, Record<string, Operation>>
      components: { schemas: Record<string, { examples?: unknown[] }> }
    }
    assert.ok(d.info.contact)
    assert.equal(d.servers[0]?.url, '/')
    assert.ok(d.servers.some((server) => server.url === '{base_url}' && server.variables))
    const operationIds = new Set<string>()
    for (const [path, operations] of Object.entries(d.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        assert.ok(operation.operationId && operation.tags?.length, `${method} ${path}`)
        operationIds.add(operation.operationId)
        for (const [status, response] of Object.entries(operation.responses)) {
          const schema = JSON.stringify(response.content?.['application/json']?.schema ?? {})
          if (Number(status) >= 400)
            assert.match(schema, /^\{"allOf":\[\{"\$ref":"#\/components\/schemas\/Error"\}/)
        }
      }
    }
    assert.equal(operationIds.size, Object.values(d.paths).flatMap(Object.keys).length)
    const { NewPlant, Plant } = d.components.schemas
    const example = NewPlant?.examples?.[0] as { id: number }
    assert.ok(Number.isSafeInteger(example.id), 'an example id a browser reads exactly')
    assert.ok(Plant?.examples?.length)
  })

  test("has no problem under Spectral's recommended OpenAPI rules (.spectral.yaml)", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plant-store-openapi-'))
    after(() => rm(dir, { recursive: true, force: true }))
    const file = join(dir, 'openapi.json')
    await writeFile(file, JSON.stringify(doc, null, 2))
    const spectral = join(projectDir, 'node_modules', '.bin', 'spectral')
    const { stdout } = await run(
      spectral,
      [
        'lint',
        '--ruleset',
        join(projectDir, '.spectral.yaml'),
        '--format',
        'json',
        '--quiet',
        file,
      ],
      { cwd: projectDir },
    ).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }))
    const problems = JSON.parse(stdout || '[]') as {
      code: string
      path: string[]
      message: string
    }[]
    assert.deepEqual(
      problems.map((p) => `${p.code} at ${p.path.join('.')}: ${p.message}`),
      [],
    )
  })
})
