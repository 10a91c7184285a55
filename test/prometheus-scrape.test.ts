import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'
import { driveCreates } from './helpers/drive.ts'
import { prometheus, promtool, startPrometheus } from './helpers/prometheus.ts'
import { startTestServer, uniqueId } from './helpers/server.ts'
import { within } from './helpers/wait.ts'

// Debian's prometheus package ships both. Outside CI a machine without them skips these tests;
// in CI their absence is a failure (.ci/run installs them).
const present = existsSync(prometheus) && existsSync(promtool)
const skip = !present && !process.env.CI ? `no Prometheus at ${prometheus}` : false

/** The example queries of the README's Observability section. */
const readmeQueries = [
  'sum by (status) (rate(plant_store_http_requests_total[5m]))',
  'histogram_quantile(0.99, sum by (le) (rate(plant_store_http_request_duration_seconds_bucket{route="/plants"}[5m])))',
]

/** The README's alert: a token that expires within 14 days (or expired, and is not revoked). */
const readmeAlert = '(plant_store_token_expiry_timestamp_seconds - time()) < 14 * 86400'

describe('the metrics, read by the real Prometheus tools', () => {
  test('the exposition passes promtool check metrics', { skip }, async () => {
    assert.ok(present, `CI needs ${promtool} (apt-get install prometheus)`)
    const s = await startTestServer({ after })
    await s.post({ id: uniqueId(), name: 'checked' })
    await s.post('{')
    const text = await (await fetch(`${s.base}/metrics`)).text()
    const checked = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' })
    assert.equal(`${checked.stdout}${checked.stderr}`.trim(), '')
    assert.equal(checked.status, 0)
  })

  test('a real Prometheus scrapes the service and its query API returns the creates the test made', {
    skip,
  }, async () => {
    assert.ok(present, `CI needs ${prometheus} (apt-get install prometheus)`)
    const s = await startTestServer({ after })
    const { query } = await startPrometheus(new URL(s.base).host, { after })

    const creates = 7
    for (let i = 0; i < creates; i++)
      assert.equal((await s.post({ id: uniqueId(), name: `scraped ${i}` })).status, 200)
    const waited = await within(30_000, async () => {
      const { data } = await query('plant_store_creates_total{job="plant-store",outcome="created"}')
      return data.result[0]?.value[1] === String(creates)
    })
    process.stderr.write(
      `# Prometheus read back ${creates} creates ${Math.round(waited)} ms after they were made\n`,
    )
    const { data } = await query('up{job="plant-store"}')
    assert.equal(data.result[0]?.value[1], '1')
    for (const promql of readmeQueries)
      assert.equal((await query(promql)).status, 'success', promql)
  })

  test('the alert on a token that expires within 14 days fires for it alone', {
    skip,
  }, async () => {
    assert.ok(present, `CI needs ${prometheus} (apt-get install prometheus)`)
    const s = await startTestServer({ after })
    const { createToken } = await import('../src/auth/token-repository.ts')
    const soon = `alert-soon-${uniqueId()}`
    const later = `alert-later-${uniqueId()}`
    await createToken(s.db.sql, soon, new Date(Date.now() + 13 * 86_400_000))
    await createToken(s.db.sql, later, new Date(Date.now() + 15 * 86_400_000))
    await s.tokens.reload()
    assert.ok(
      readFileSync(join(projectDir, 'README.md'), 'utf8')
        .replace(/\s+/g, ' ')
        .includes(readmeAlert),
    )
    const { query } = await startPrometheus(new URL(s.base).host, { after })
    let fired: string[] = []
    await within(30_000, async () => {
      fired = (await query(readmeAlert)).data.result.map((r) => r.metric.token ?? '')
      return fired.length > 0
    })
    assert.deepEqual(fired, [soon])
  })

  test('every query of the Grafana dashboard (ops/grafana) returns data from a real Prometheus that scraped the service under load', {
    skip,
  }, async () => {
    assert.ok(present, `CI needs ${prometheus} (apt-get install prometheus)`)
    const s = await startTestServer({ after })
    const { createToken } = await import('../src/auth/token-repository.ts')
    await createToken(s.db.sql, `dashboard-${uniqueId()}`, new Date(Date.now() + 30 * 86_400_000))
    await s.tokens.reload()
    const dashboard = JSON.parse(
      readFileSync(join(projectDir, 'ops', 'grafana', 'plant-store.dashboard.json'), 'utf8'),
    ) as { panels: { title: string; targets: { expr: string }[] }[] }
    // Grafana's variables, as it would fill them in for this scrape (every 1 s).
    const queries = dashboard.panels.flatMap((p) =>
      p.targets.map((t) => ({
        panel: p.title,
        promql: t.expr.replaceAll('$job', 'plant-store').replaceAll('$__rate_interval', '30s'),
      })),
    )
    assert.ok(queries.length >= 12)
    const { query } = await startPrometheus(new URL(s.base).host, { after })
    const drive = driveCreates(s.base, s.token, { concurrency: 8, pauseMs: 2 })
    const empty = new Set(queries.map((q) => q.promql))
    try {
      await within(45_000, async () => {
        for (const q of [...empty]) {
          const answer = await query(q)
          assert.equal(answer.status, 'success', q)
          if (answer.data.result.length > 0) empty.delete(q)
        }
        return empty.size === 0
      })
    } catch {
      assert.deepEqual([...empty], [], 'queries that returned no data')
    } finally {
      await drive.stop()
    }
  })
})
