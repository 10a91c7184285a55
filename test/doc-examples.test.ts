import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { cp, readFile, symlink } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { projectDir, type Ran } from './helpers/cli.ts'
import { diskTempDir, tempDir } from './helpers/temp-dir.ts'
import { within } from './helpers/wait.ts'

// Every shell example of README.md and docs/ (the commands of each ```sh block) is run here
// against a service started with the README's own `npm start`, or run by CI's own scripts word
// for word, or marked in its line as needing what a test machine lacks ("needs …"). A command
// added to the docs without a place in this table, or one that stops working, fails the suite.

type How =
  /** Run by a test of this file. */
  | { run: string }
  /** Run by a CI script: `file` holds `needle`. */
  | { ci: string; needle: string }
  /** Run by another test: `file` holds a test of that name. */
  | { test: string; name: string }
  /** Not run: the doc's line says what it needs. */
  | { needs: string }

const runs = (name: string): How => ({ run: name })
const ciRun = (needle: string): How => ({ ci: '.ci/run', needle })
const compose = (needle: string): How => ({ ci: '.ci/compose-check.sh', needle })

/** Each documented command (continuation lines joined, comments dropped) and where it runs. */
const examples: Record<string, How> = {
  // README.md
  'npm ci && npm start': runs('npm start'),
  'npm ci && npm test': ciRun('npm test'),
  'TOKEN=$(cat .data/dev-token)': runs('the first create'),
  'curl -i http://127.0.0.1:8080/plants -H "Authorization: Bearer $TOKEN" -H \'Content-Type: application/json\' -d \'{"id": 9007199254740993, "name": "Monstera", "tag": "tropical"}\'':
    runs('the first create'),
  'npm test': ciRun('npm test'),
  'npm test -- test/create-plant.test.ts': runs('npm test -- FILE'),
  'npm run typecheck': ciRun('npm run typecheck\n'),
  'npm run lint': ciRun('npm run lint'),
  'npm run bench': { needs: 'wrk and pgbench, 20 minutes' },
  // docs/containers.md
  'docker compose up --build -d': compose('compose up -d'),
  'docker compose run --rm setup npm run -s token -- create alice': compose(
    'compose run --rm -T setup npm run -s token -- create ci',
  ),
  'curl http://127.0.0.1:8080/readyz': compose('$base/readyz'),
  'docker compose down': compose('compose down'),
  // docs/development.md
  'npm run typecheck:deno': ciRun('npm run typecheck:deno'),
  'npm run test:faults': { test: 'test/doc-examples.test.ts', name: 'npm run test:faults' },
  'npm run bench -- --soak 1000000': { needs: 'wrk' },
  '.ci/engine.sh start': ciRun('.ci/engine.sh start'),
  'eval "$(.ci/images.sh)"': ciRun('eval "$(.ci/images.sh)"'),
  'TEST_DATABASE=container TEST_POSTGRES_IMAGE=$POSTGRES_IMAGE TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 npm test':
    ciRun('containers=(TEST_DATABASE=container "TEST_POSTGRES_IMAGE=$POSTGRES_IMAGE")'),
  '.ci/engine.sh stop': ciRun(".ci/engine.sh stop'"),
  // docs/scaling.md (test/faults/citus-patroni.test.ts starts such instances on its own cluster)
  "DATABASE_URL='postgres://plant_store:…@g1a:5432,g1b:5432/plants?target_session_attrs=read-write' npm start":
    { needs: 'a Patroni cluster in Citus mode' },
  "DATABASE_URL='postgres://plant_store:…@g0a:5432,g0b:5432/plants?target_session_attrs=read-write' npm start":
    { needs: 'a Patroni cluster in Citus mode' },
  // docs/observability.md (test/otlp-spans.test.ts starts instances with these settings)
  'OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=prod OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.1 npm start':
    { needs: 'an OpenTelemetry collector at collector:4318' },
  // docs/openapi.md
  'npm run openapi': runs('npm run openapi'),
  'npx openapi-typescript dist/openapi.json -o plants-api.d.ts': { needs: 'openapi-typescript' },
  'npx @openapitools/openapi-generator-cli generate -i dist/openapi.json -g python -o client/': {
    needs: 'Java',
  },
  // docs/operations.md
  'npm run token -- create NAME': runs('the token commands'),
  'npm run token -- create NAME --expires-in 30d': runs('the token commands'),
  'TOKEN=$(npm run -s token -- create ci)': runs('the token commands'),
  'npm run token -- rotate NAME': runs('the token commands'),
  'npm run token -- list': runs('the token commands'),
  'npm run token -- list --expiring 14d': runs('the token commands'),
  'npm run token -- revoke NAME': runs('the token commands'),
  'npm run migrate': runs('the migrate commands'),
  'npm run migrate -- down 1': runs('the migrate commands'),
  'npm ci': ciRun('npm ci'),
  'deno task start': {
    test: 'test/deno-runtime.test.ts',
    name: 'creates, retries, refuses 40005, 40009 and 401',
  },
  'deno task token create NAME': runs('deno task token'),
  'deno task check': runs('deno task check'),
}

/** The documents whose examples are held here. */
const documents = [
  'README.md',
  ...readdirSync(join(projectDir, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
]

/** The commands of every ```sh block of `file`, each with its line as written. */
function shellExamples(file: string): { command: string; line: string }[] {
  const out: { command: string; line: string }[] = []
  let inBlock = false
  let pending = ''
  let written = ''
  for (const line of readFileSync(join(projectDir, file), 'utf8').split('\n')) {
    if (line.startsWith('```')) {
      inBlock = !inBlock && line.trim() === '```sh'
      continue
    }
    if (!inBlock || line.trimStart().startsWith('#')) continue
    written += `${line}\n`
    // A comment starts at " #" outside quotes; the commands here quote no " #".
    const code = line.replace(/\s+#\s.*$/, '').trimEnd()
    if (code.endsWith('\\')) {
      pending += `${code.slice(0, -1).trim()} `
      continue
    }
    const command = `${pending}${code.trim()}`.replace(/\s+/g, ' ')
    if (command !== '') out.push({ command, line: written })
    pending = ''
    written = ''
  }
  return out
}

const found = documents.flatMap((file) =>
  shellExamples(file).map((example) => ({ file, ...example })),
)

/** Runs a shell command line in `cwd` with only the path, home and `env`. */
function sh(line: string, cwd: string, env: Record<string, string> = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', line], {
      cwd,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString()
    })
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString()
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** The block of `file` whose text holds `marker`, without its fences. */
function block(file: string, marker: string): string {
  const text = readFileSync(join(projectDir, file), 'utf8')
  const at = text.indexOf(marker)
  assert.ok(at >= 0, `${file} no longer holds ${marker}`)
  const start = text.lastIndexOf('```sh\n', at) + '```sh\n'.length
  return text.slice(start, text.indexOf('```', at))
}

describe('the shell examples of README.md and docs/', () => {
  test('every command of a ```sh block is run here, run by CI word for word, or marked as needing something', () => {
    const problems: string[] = []
    for (const { file, command, line } of found) {
      const how = examples[command]
      if (how === undefined) {
        problems.push(`${file}: "${command}" is in no test (add it to test/doc-examples.test.ts)`)
        continue
      }
      if ('needs' in how && !line.includes('needs'))
        problems.push(`${file}: "${command}" is not run; its line must say what it needs`)
      if ('ci' in how && !readFileSync(join(projectDir, how.ci), 'utf8').includes(how.needle))
        problems.push(`${file}: "${command}": ${how.ci} no longer runs ${how.needle}`)
      if ('test' in how && !readFileSync(join(projectDir, how.test), 'utf8').includes(how.name))
        problems.push(`${file}: "${command}": ${how.test} has no test "${how.name}"`)
    }
    for (const command of Object.keys(examples))
      if (!found.some((x) => x.command === command))
        problems.push(`"${command}" is in this test's table but in no document`)
    assert.deepEqual(problems, [])
  })

  test('npm run test:faults runs the fault suite: test/run.ts given test/faults, as npm test runs it among the rest', async () => {
    const scripts = JSON.parse(await readFile(join(projectDir, 'package.json'), 'utf8')).scripts
    assert.equal(scripts['test:faults'], 'tsx test/run.ts test/faults')
    assert.equal(scripts.test, 'tsx test/run.ts')
  })

  test('npm test -- FILE runs only that file, and passes', async () => {
    // On the suite's own database, as a developer with TEST_DATABASE_URL set runs it.
    const ran = await sh('npm test -- test/create-plant.test.ts', projectDir, {
      TEST_DATABASE_URL: process.env.TEST_DATABASE_URL ?? '',
    })
    assert.equal(ran.code, 0, ran.stdout + ran.stderr)
    assert.match(ran.stdout, /create-plant\.test\.ts/)
    assert.doesNotMatch(ran.stdout, /idempotent-create\.test\.ts/)
  })
})

describe('the examples on a service started as the README says (npm start in a fresh copy)', () => {
  test('npm start, the first create, the token and migrate commands, npm run openapi and the deno tasks', async () => {
    // On the disk: the deno tasks below use the embedded database under it (.data), and Deno
    // refuses paths under /dev (test/run.ts may put the others in /dev/shm).
    const { dir, ...tmp } = await tempDir({ after }, 'plant-store-examples-', diskTempDir())
    for (const item of ['package.json', 'tsconfig.json', 'deno.json', 'src', 'migrations'])
      await cp(join(projectDir, item), join(dir, item), { recursive: true })
    await symlink(join(projectDir, 'node_modules'), join(dir, 'node_modules'))

    // npm start: the service on 127.0.0.1:8080 (here a free port: PORT=0, the only change).
    const service = spawn('npm', ['start'], {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0' },
      stdio: ['ignore', 'pipe', 'inherit'],
      detached: true,
    })
    const exited = new Promise((resolve) => service.on('exit', resolve))
    // npm, its shell, the service and its embedded PostgreSQL are one process group: all of it
    // is stopped before the folder goes.
    tmp.after(async () => {
      const group = -(service.pid ?? 0)
      const alive = () => {
        try {
          process.kill(group, 0)
          return true
        } catch {
          return false
        }
      }
      if (alive()) process.kill(group, 'SIGTERM')
      await within(20_000, async () => !alive())
    })
    let output = ''
    const base = await new Promise<string>((resolve, reject) => {
      service.stdout?.on('data', (c: Buffer) => {
        output += c.toString()
        const at = /"message":"listening".*"url":"(http:\/\/[^"]+)"/.exec(output)
        if (at?.[1] !== undefined) resolve(at[1])
      })
      void exited.then(() => reject(new Error(`npm start exited: ${output}`)))
    })
    const port = new URL(base).port

    // README, The two commands: the first create, as written but for the port.
    const first = block('README.md', 'TOKEN=$(cat .data/dev-token)')
    const script = first.replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)
    const created = await sh(script, dir)
    assert.equal(created.code, 0, created.stderr)
    const expected = first
      .split('\n')
      .filter((l) => l.startsWith('# '))
      .map((l) => l.slice(2))
    assert.ok(expected.length === 2, 'the README shows the status line and the body')
    assert.equal(created.stdout.split('\r\n')[0], expected[0])
    assert.equal(created.stdout.split('\r\n\r\n')[1], expected[1])

    // docs/operations.md, Tokens: each line as written, NAME a name of ours.
    const tokens = block('docs/operations.md', 'npm run token -- create NAME')
      .split('\n')
      .map((l) => l.replace(/\s+#\s.*$/, '').trim())
      .filter(Boolean)
    const make = await sh(tokens[0]?.replace('NAME', 'example') ?? '', dir)
    assert.equal(make.code, 0, make.stderr)
    const made = make.stdout.trim().split('\n').at(-1) ?? ''
    assert.match(made, /^pst_/, 'create prints the token on its own line')
    const month = await sh(tokens[1]?.replace('NAME', 'example-month') ?? '', dir)
    assert.equal(month.code, 0, month.stderr)
    assert.match(month.stderr, /expiring \S+ \(in 30 days\)/)
    const quiet = await sh(`${tokens[2]}; printf '%s' "$TOKEN"`, dir)
    assert.equal(quiet.code, 0, quiet.stderr)
    assert.match(quiet.stdout, /^pst_[^\s]+$/, 'with -s the output is the token alone')
    const rotated = await sh(tokens[3]?.replace('NAME', 'example-month') ?? '', dir)
    assert.equal(rotated.code, 0, rotated.stderr)
    assert.match(rotated.stdout.trim().split('\n').at(-1) ?? '', /^pst_/)
    assert.match(rotated.stderr, /the old one keeps working until \S+ \(in 24 hours\)/)
    const listed = await sh(tokens[4] ?? '', dir)
    assert.equal(listed.code, 0, listed.stderr)
    assert.match(listed.stdout, /^example\t/m)
    assert.match(listed.stdout, /^example-month\t.*\trotated: ends \S+Z$/m)
    assert.ok(!listed.stdout.includes(made), 'list never prints a token')
    const expiring = await sh(tokens[5] ?? '', dir)
    assert.equal(expiring.code, 0, expiring.stderr)
    assert.doesNotMatch(expiring.stdout, /^example/m, 'no token here expires within 14 days')
    const revoked = await sh(tokens[6]?.replace('NAME', 'example') ?? '', dir)
    assert.equal(revoked.code, 0, revoked.stderr)
    // The running service hears of the revocation within 1 s.
    await within(2000, async () => {
      const res = await fetch(`${base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${made}`, 'content-type': 'application/json' },
        body: '{"id":1,"name":"x"}',
      })
      await res.arrayBuffer()
      return res.status === 401
    })

    // docs/operations.md, Migrations: down 1, then up again; the service stays up.
    const down = await sh('npm run migrate -- down 1', dir)
    assert.equal(down.code, 0, down.stderr)
    const up = await sh('npm run migrate', dir)
    assert.equal(up.code, 0, up.stderr)
    const ready = await fetch(`${base}/readyz`)
    assert.equal(ready.status, 200, await ready.text())

    // docs/openapi.md: npm run openapi writes dist/openapi.json.
    const openapi = await sh('npm run openapi', dir)
    assert.equal(openapi.code, 0, openapi.stderr)
    const document = JSON.parse(await readFile(join(dir, 'dist', 'openapi.json'), 'utf8'))
    assert.equal(document.openapi, '3.1.0')

    // docs/operations.md, Deno: the token task, and the type check.
    const denoToken = await sh('./node_modules/.bin/deno task token create deno-example', dir)
    assert.equal(denoToken.code, 0, denoToken.stderr)
    assert.match(denoToken.stdout.trim().split('\n').at(-1) ?? '', /^pst_/)
    const check = await sh('./node_modules/.bin/deno task check', dir)
    assert.equal(check.code, 0, check.stderr)
  })
})
