import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { after, describe, test } from 'node:test'
import { projectDir } from '../helpers/cli.ts'
import * as driving from '../helpers/drive.ts'
import { partitionSkip } from '../helpers/partition.ts'
import { onFailoverUrl, partitionAndRecover } from '../helpers/partition-run.ts'
import { startServiceProcess, tokenFor } from '../helpers/process.ts'
import { connect, failOver, startPrimaryAndStandby } from '../helpers/replication.ts'

// Managed PostgreSQL services require TLS. The servers here take TLS with a certificate of a
// test CA (test/helpers/tls.ts); the service verifies it (sslmode=verify-full, the CA given to
// Node by NODE_EXTRA_CA_CERTS) or only encrypts (sslmode=require, for the in-process service,
// whose CA list was fixed when the test process started).

const url = (hosts: string, mode: string) =>
  `postgres://postgres@${hosts}/plants?target_session_attrs=read-write&sslmode=${mode}`

/** Whether every session of the service on `port` is encrypted, and how many there are. */
async function sessionsOver(port: number): Promise<{ sessions: number; plain: number }> {
  const sql = connect(port, 'postgres')
  const [row] = await sql<{ sessions: number; plain: number }[]>`
    select count(*)::int as sessions, count(*) filter (where not s.ssl)::int as plain
    from pg_stat_activity a join pg_stat_ssl s using (pid)
    where a.application_name like 'plant-store%'`
  await sql.end()
  return row ?? { sessions: 0, plain: 0 }
}

const post = async (base: string, token: string, body: object) => {
  const res = await fetch(`${base}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  return { status: res.status, body: (await res.json()) as { error?: number; name?: string } }
}

// The test CA is made with openssl, which CI installs; elsewhere without it these tests skip with
// a line saying so. In CI they never skip.
const noOpenssl =
  spawnSync('openssl', ['version']).status === 0
    ? undefined
    : 'no openssl (apt-get install openssl)'
const skip = process.env.CI === undefined && noOpenssl !== undefined ? noOpenssl : false
if (skip) process.stderr.write(`test/faults/tls.test.ts: skipped: ${skip}\n`)

// Every test starts servers of its own: two run at once.
describe('over TLS (a PostgreSQL with ssl = on and a test CA)', { skip, concurrency: 2 }, () => {
  test('sslmode=verify-full with the CA in sslrootcert: migrations, create, retry and 40009 hold, and every session of the service is encrypted', async () => {
    const { primary, standby, caFile, cleanup } = await startPrimaryAndStandby(
      { after },
      { tls: true },
    )
    const hosts = `127.0.0.1:${primary.port},127.0.0.1:${standby.port}`
    const service = await startServiceProcess(
      'node',
      { DATABASE_URL: `${url(hosts, 'verify-full')}&sslrootcert=${caFile}` },
      cleanup,
    )
    const sql = connect(primary.port)
    cleanup.after(() => sql.end())
    const token = await tokenFor(sql, service.base, 'tls')
    const id = Date.now()
    assert.deepEqual(await post(service.base, token, { id, name: 'Monstera' }), {
      status: 200,
      body: { name: 'Monstera' },
    })
    assert.equal((await post(service.base, token, { id, name: 'Monstera' })).status, 200)
    assert.equal((await post(service.base, token, { id, name: 'Fern' })).body.error, 40009)
    const { sessions, plain } = await sessionsOver(primary.port)
    assert.ok(sessions >= 3, `${sessions} sessions`)
    assert.equal(plain, 0)
  })

  test('a certificate no trusted CA signed: npm start stops with one line naming the database and why, exit status 1', async () => {
    const { primary, cleanup } = await startPrimaryAndStandby({ after }, { tls: true })
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: projectDir,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        PORT: '0',
        DATABASE_URL: url(`127.0.0.1:${primary.port}`, 'verify-full'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    cleanup.after(() => child.kill('SIGKILL'))
    let out = ''
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString()
    })
    child.stderr.on('data', (c: Buffer) => {
      out += c.toString()
    })
    const code = await new Promise((r) => child.on('exit', r))
    assert.equal(code, 1)
    const lines = out.trim().split('\n')
    const last = lines[lines.length - 1] ?? ''
    assert.match(last, new RegExp(`127\\.0\\.0\\.1:${primary.port}`))
    assert.match(last, /certificate/)
    assert.doesNotMatch(out, /\n\s+at /, 'a stack trace')
  })

  test('a 20 s silent partition between the service and the primary, over TLS: 200 within 5 s of the heal, /readyz 503 until creates succeed, nothing lost', {
    skip: partitionSkip(),
    timeout: 120_000,
  }, async (t) => {
    const arranged = await onFailoverUrl(t, { tls: true })
    assert.equal((await sessionsOver(arranged.port)).plain, 0)
    await partitionAndRecover(t, arranged, 20, 'both')
  })

  test('failover over TLS, the primary first: kill -9, the standby promoted 0.6 s later; nothing acknowledged lost, the first 200 within 5 s of the promotion', async () => {
    const { primary, standby, caFile, cleanup } = await startPrimaryAndStandby(
      { after },
      { tls: true },
    )
    const service = await startServiceProcess(
      'node',
      {
        DATABASE_URL: url(`127.0.0.1:${primary.port},127.0.0.1:${standby.port}`, 'verify-full'),
        NODE_EXTRA_CA_CERTS: caFile ?? '',
      },
      cleanup,
    )
    const first = connect(primary.port)
    const token = await tokenFor(first, service.base, 'tls-failover')
    await first.end()
    const drive = driving.driveCreates(service.base, token, { concurrency: 8 })
    await driving.underWay(drive)
    const promoted = await failOver(primary, standby)
    await driving.pastTheFault(drive, promoted)
    await drive.stop()
    const newPrimary = connect(standby.port)
    cleanup.after(() => newPrimary.end())
    const firstAfter = drive.acknowledgedAt.find((at) => at > promoted)
    process.stderr.write(
      `# failover over TLS: ${drive.acknowledged.length} creates 200, ${drive.unavailable.length} 503; first 200 ${firstAfter === undefined ? 'never' : `${Math.round(firstAfter - promoted)} ms`} after the promotion; slowest ${Math.round(drive.slowestMs)} ms\n`,
    )
    assert.deepEqual(
      [...drive.statuses.keys()].filter((s) => s !== 200 && s !== 503),
      [],
    )
    assert.deepEqual(await driving.lostAcknowledgements(newPrimary, drive.acknowledged), [])
    assert.ok(firstAfter !== undefined && firstAfter - promoted < 5000, 'no 200 within 5 s')
    for (const plant of drive.unavailable) {
      const res = await fetch(`${service.base}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: driving.bodyOf(plant),
      })
      await res.arrayBuffer()
      assert.equal(res.status, 200)
    }
    assert.equal((await sessionsOver(standby.port)).plain, 0)
  })
})
