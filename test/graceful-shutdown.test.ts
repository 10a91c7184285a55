import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { after, describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'
import { createTestDatabase } from './helpers/database.ts'

describe('SIGTERM and SIGINT', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    test(`${signal} stops accepting, finishes the request in flight with its row committed, and exits 0`, async () => {
      const db = await createTestDatabase({ after })
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
        cwd: projectDir,
        env: { PATH: process.env.PATH, DATABASE_URL: db.url, PORT: '0', LOG_LEVEL: 'info' },
        stdio: ['ignore', 'pipe', 'inherit'],
      })
      after(() => child.kill('SIGKILL'))
      const lines: string[] = []
      const base = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (c: Buffer) => {
          lines.push(...c.toString().trim().split('\n'))
          const listening = lines
            .map((l) => JSON.parse(l) as { message: string })
            .find((l) => l.message.startsWith('listening on '))
          if (listening) resolve(listening.message.slice('listening on '.length))
        })
        child.on('exit', () => reject(new Error(`exited early: ${lines.join('\n')}`)))
      })
      const exited = new Promise<number | null>((resolve) =>
        child.on('exit', (code) => resolve(code)),
      )
      const token = 'pst_shutdowntoken'
      await db.sql`insert into api_tokens (name, token_sha256) values ('shutdown', sha256(${token}::bytea))`
      // Wait for the notification to reach the service.
      for (let i = 0; i < 50; i++) {
        const r = await fetch(`${base}/plants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
        })
        if (r.status !== 401) break
        await new Promise((r) => setTimeout(r, 20))
      }

      let inFlight: Promise<Response> | undefined
      await db.sql.begin(async (tx) => {
        await tx`lock table plants in access exclusive mode`
        inFlight = fetch(`${base}/plants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ id: 424242, name: 'in flight' }),
        })
        await new Promise((r) => setTimeout(r, 300))
        child.kill(signal)
        await new Promise((r) => setTimeout(r, 300))
        await assert.rejects(fetch(`${base}/healthz`), 'a new connection is refused while stopping')
      })
      const res = await inFlight
      assert.equal(res?.status, 200)
      assert.deepEqual(await res?.json(), { name: 'in flight' })
      assert.equal(await exited, 0)
      assert.equal((await db.sql`select 1 from plants where id = 424242`).length, 1)
      const messages = lines.map((l) => (JSON.parse(l) as { message: string }).message)
      assert.ok(messages.includes('stopped'), messages.join('\n'))
    })
  }
})
