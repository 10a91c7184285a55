import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { prepareTokens } from '../src/auth/start-tokens.ts'
import { createToken } from '../src/auth/token-repository.ts'
import { createLog } from '../src/log.ts'
import { createTestDatabase } from './helpers/database.ts'
import { tempDir } from './helpers/temp-dir.ts'

describe('the dev token of the embedded default', () => {
  test('the dev token never expires and is not warned about beside the embedded database; another token that never expires is', async () => {
    const db = await createTestDatabase({ after })
    const { dir } = await tempDir({ after }, 'plant-store-dev-token-')
    const lines: { level: string; message: string; tokens?: string; count?: number }[] = []
    const log = createLog('info', (line) => lines.push(JSON.parse(line)))
    ;(await prepareTokens(db.sql, log, { embedded: true, dataDir: dir }))()
    const token = (await readFile(join(dir, 'dev-token'), 'utf8')).trim()
    const rows = await db.sql`select name, expires_at from api_tokens`
    assert.deepEqual(
      rows.map((r) => [r.name, r.expires_at]),
      [['dev', null]],
    )
    assert.deepEqual(
      lines.filter((l) => l.level === 'warn'),
      [],
    )
    // The next start, with a token of an operator's that never expires beside it.
    await createToken(db.sql, 'forever', null)
    ;(await prepareTokens(db.sql, log, { embedded: true, dataDir: dir }))()
    const warnings = lines.filter((l) => l.level === 'warn')
    assert.equal(warnings.length, 1)
    assert.equal(warnings[0]?.tokens, 'forever')
    assert.match(
      warnings[0]?.message ?? '',
      /^tokens that never expire: a leaked copy works until it is revoked/,
    )
    assert.equal(warnings[0]?.count, 1)
    assert.ok(!warnings[0]?.message.includes(token))
  })

  test('on a database of its own (DATABASE_URL), a token named dev that never expires is warned about like any other', async () => {
    const db = await createTestDatabase({ after })
    const { dir } = await tempDir({ after }, 'plant-store-dev-token-')
    const lines: { level: string; message: string; tokens?: string; count?: number }[] = []
    const log = createLog('info', (line) => lines.push(JSON.parse(line)))
    await createToken(db.sql, 'dev', null)
    ;(await prepareTokens(db.sql, log, { embedded: false, dataDir: dir }))()
    const warnings = lines.filter((l) => l.level === 'warn')
    assert.equal(warnings.length, 1)
    assert.equal(warnings[0]?.tokens, 'dev')
  })
})
