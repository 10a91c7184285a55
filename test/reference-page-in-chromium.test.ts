import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { chromium } from 'playwright-core'
import { projectDir } from './helpers/cli.ts'
import { startTestServer } from './helpers/server.ts'

// Debian's chromium package; playwright-core drives it and never downloads a browser.
const executablePath = process.env.CHROMIUM_PATH || '/usr/bin/chromium'
const present = existsSync(executablePath)
// Outside CI a machine without Chromium skips this test; in CI its absence is a failure.
const skip = !present && !process.env.CI ? `no Chromium at ${executablePath}` : false
// UPDATE_SCREENSHOT=1 writes the README's picture of the page.
const screenshot = join(projectDir, 'docs', 'reference-page.png')

describe('the API reference page in a real browser (headless Chromium)', () => {
  test('renders the document with no console error, CSP violation or outside request; authorise and try a create that returns 200', {
    skip,
  }, async () => {
    assert.ok(present, `CI needs Chromium at ${executablePath} (apt-get install chromium)`)
    const s = await startTestServer({ after })
    const origin = new URL(s.base).origin
    const browser = await chromium.launch({
      executablePath,
      headless: true,
      // As root in a container: no sandbox. The rest keeps Chromium from calling home.
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    })
    after(() => browser.close())
    const page = await browser.newPage({ viewport: { width: 1280, height: 1100 } })
    const problems: string[] = []
    const elsewhere: string[] = []
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`)
    })
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))
    page.on('request', (r) => {
      const url = new URL(r.url())
      if (url.protocol !== 'data:' && url.origin !== origin) elsewhere.push(r.url())
    })

    await page.goto(`${s.base}/docs`)
    const operation = page.locator('#operations-plants-createPlant')
    await operation.locator('.opblock-summary').click()
    // Every error code is listed with its meaning; 40009 among them.
    await page.getByRole('cell', { name: '40009', exact: true }).first().waitFor()
    assert.deepEqual(problems, [], 'the page rendered with errors')
    // The schemas are shown expanded; NewPlant's id is the one int64 among them.
    const id = page.locator('section.models .json-schema-2020-12-property', { hasText: /^id/ })
    await id.getByText('int64', { exact: true }).waitFor()

    await page.locator('.auth-wrapper .authorize').click()
    await page.locator('.auth-container input').fill(s.token)
    await page.locator('.auth-btn-wrapper .authorize').click()
    await page.locator('.auth-btn-wrapper .btn-done').click()
    // The top of the page, authorised (the picture must not show a token, so before try-it).
    if (process.env.UPDATE_SCREENSHOT) {
      await page.mouse.wheel(0, -100_000)
      await page.screenshot({ path: screenshot })
    }

    await operation.locator('.try-out__btn').click()
    const plantId = 4_503_599_627_370_497
    await operation
      .locator('textarea.body-param__text')
      .fill(`{"id": ${plantId}, "name": "Tried in the browser", "tag": "docs"}`)
    await operation.locator('.execute').click()
    const live = operation.locator('.live-responses-table')
    await live.locator('.response-col_status').getByText('200').waitFor()
    const body = await live.locator('.response-col_description .microlight').first().textContent()
    assert.deepEqual(JSON.parse(body ?? ''), { name: 'Tried in the browser', tag: 'docs' })

    const [row] = await s.db.sql`select id::text, created_by from plants where id = ${plantId}`
    assert.equal(row?.id, String(plantId))
    assert.deepEqual(problems, [])
    assert.deepEqual(elsewhere, [])
  })
})
