import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { ensureDevToken } from '../src/auth/dev-token.ts'
import { watchTokenLifetimes } from '../src/auth/token-warnings.ts'
import { createLog } from '../src/log.ts'
import { createTestDatabase } from './helpers/database.ts'
import { tempDir } from './helpers/temp-dir.ts'

describe('the dev token of the embedded default', () => {
  test('the dev token never expires, and the start-up warning names it', async () => {
    const db = await createTestDatabase({ after })
    const { dir } = await tempDir({ after }, 'plant-store-dev-token-')
    const lines: { level: string; message: string; tokens?: string }[] = []
    const log = createLog('info', (line) => lines.push(JSON.parse(line)))
    await ensureDevToken(db.sql, dir, log)
    const token = (await readFile(join(dir, 'dev-token'), 'utf8')).trim()
    const rows = await db.sql`select name, expires_at from api_tokens`
    assert.deepEqual(
      rows.map((r) => [r.name, r.expires_at]),
      [['dev', null]],
    )
    const stop = await watchTokenLifetimes(db.sql, log)
    stop()
    const warning = lines.find((l) => l.level === 'warn')
    assert.equal(warning?.tokens, 'dev')
    assert.match(
      warning?.message ?? '',
      /^1 token\(s\) never expire: dev; a leaked copy works until it is revoked/,
    )
    assert.ok(!warning?.message.includes(token))
  })
})
