import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { parse } from 'yaml'
import { parseConfig } from '../src/config.ts'
import { projectDir } from './helpers/cli.ts'

type Service = {
  image?: string
  build?: unknown
  environment: Record<string, string>
  ports?: string[]
  volumes?: string[]
  depends_on?: Record<string, { condition: string }>
  healthcheck?: { test: string[] }
  command?: string[]
  stop_signal?: string
  stop_grace_period?: string
}
const compose = parse(readFileSync(join(projectDir, 'compose.yaml'), 'utf8')) as {
  services: Record<string, Service>
  volumes: Record<string, unknown>
}
const dockerfile = readFileSync(join(projectDir, 'Dockerfile'), 'utf8')
const app = compose.services.app as Service
const db = compose.services.db as Service
const setup = compose.services.setup as Service

// Compose substitutes ${VAR:-default}; the defaults are what a plain `docker compose up` uses.
const substitute = (s: string) => s.replace(/\$\{(\w+):-([^}]*)\}/g, (_, __, d: string) => d)

describe('compose.yaml and the Dockerfile', () => {
  test('PostgreSQL 18 keeps its data in a named volume and reports ready with pg_isready', () => {
    assert.match(substitute(db.image ?? ''), /^postgres:18/)
    const [volume, target] = (db.volumes?.[0] ?? '').split(':')
    assert.ok(volume && volume in compose.volumes, 'a named volume')
    assert.equal(target, '/var/lib/postgresql')
    assert.match(db.healthcheck?.test.join(' ') ?? '', /pg_isready/)
  })

  test('the service starts only after PostgreSQL is healthy and setup has migrated, and its own health check is /readyz', () => {
    assert.deepEqual(app.depends_on, {
      db: { condition: 'service_healthy' },
      setup: { condition: 'service_completed_successfully' },
    })
    assert.match(app.healthcheck?.test.join(' ') ?? '', /\/readyz/)
  })

  test('the service gets valid settings: DATABASE_URL to the db service, HOST 0.0.0.0, the published port', () => {
    const env = Object.fromEntries(
      Object.entries(app.environment).map(([k, v]) => [k, substitute(String(v))]),
    )
    const config = parseConfig(env)
    assert.equal(config.host, '0.0.0.0')
    assert.equal(new URL(config.databaseUrl ?? '').hostname, 'db')
    assert.equal(new URL(config.databaseUrl ?? '').pathname, `/${db.environment.POSTGRES_DB}`)
    assert.deepEqual(app.ports, [`${config.port}:${config.port}`])
    assert.match(app.healthcheck?.test.join(' ') ?? '', new RegExp(`:${config.port}/readyz`))
  })

  test('setup migrates and makes plants_app as the owner; the service connects as plants_app with MIGRATE=off', () => {
    const env = (service: Service) =>
      Object.fromEntries(
        Object.entries(service.environment).map(([k, v]) => [k, substitute(String(v))]),
      )
    const owner = new URL(parseConfig(env(setup)).databaseUrl ?? '')
    assert.equal(decodeURIComponent(owner.username), db.environment.POSTGRES_USER)
    assert.deepEqual(setup.command, [
      'node',
      '--import',
      'tsx',
      'src/main.ts',
      'grant',
      'plants_app',
    ])
    const config = parseConfig(env(app))
    const service = new URL(config.databaseUrl ?? '')
    assert.equal(service.username, 'plants_app')
    assert.equal(decodeURIComponent(service.password), env(setup).APP_ROLE_PASSWORD)
    assert.equal(config.migrate, false)
    assert.equal(setup.image, app.image)
  })

  test('the metrics have a port of their own that compose never publishes', () => {
    const env = Object.fromEntries(
      Object.entries(app.environment).map(([k, v]) => [k, substitute(String(v))]),
    )
    const config = parseConfig(env)
    assert.ok(config.metricsPort !== undefined, 'METRICS_PORT is set')
    assert.notEqual(config.metricsPort, config.port)
    assert.ok(
      !(app.ports ?? []).some((p) => p.split(':').includes(String(config.metricsPort))),
      `published: ${app.ports}`,
    )
  })

  test('docker stop is graceful: SIGTERM with more grace than the 10 s drain, node as PID 1', () => {
    assert.equal(app.stop_signal, 'SIGTERM')
    assert.ok(Number.parseInt(app.stop_grace_period ?? '0', 10) > 10)
    assert.match(dockerfile, /^STOPSIGNAL SIGTERM$/m)
    assert.match(dockerfile, /^CMD \["node", "--import", "tsx", "src\/main.ts"\]$/m)
  })

  test('the image is multi-stage, production, non-root, without dev dependencies', () => {
    assert.equal(dockerfile.match(/^FROM /gm)?.length, 2)
    assert.match(dockerfile, /npm ci --omit=dev/)
    assert.match(dockerfile, /NODE_ENV=production/)
    assert.match(dockerfile, /^USER node$/m)
    for (const needed of ['migrations', 'src', 'package.json'])
      assert.match(dockerfile, new RegExp(`COPY .*${needed}`))
  })
})
