import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'
import { promtool } from './helpers/prometheus.ts'
import { startTestServer } from './helpers/server.ts'

// The alerting rules that ship in ops/prometheus/, checked and unit-tested by Debian's promtool.
// Outside CI a machine without it skips; in CI its absence is a failure (.ci/run installs it).
const skip = !existsSync(promtool) && !process.env.CI ? `no promtool at ${promtool}` : false
const rulesDir = join(projectDir, 'ops', 'prometheus')
const rules = join(rulesDir, 'plant-store.rules.yml')

const run = (...args: string[]) => spawnSync(promtool, args, { cwd: rulesDir, encoding: 'utf8' })

describe('the alerting rules (ops/prometheus/plant-store.rules.yml)', () => {
  test('promtool check rules accepts every rule', { skip }, () => {
    const checked = run('check', 'rules', rules)
    assert.equal(checked.status, 0, checked.stdout + checked.stderr)
    assert.match(checked.stdout, /SUCCESS: 9 rules found/)
  })

  test('promtool test rules: every alert fires for the instance in trouble, after its for:, and not for the other', {
    skip,
  }, () => {
    const tested = run('test', 'rules', 'plant-store.rules.test.yml')
    assert.equal(tested.status, 0, tested.stdout + tested.stderr)
    const text = readFileSync(join(rulesDir, 'plant-store.rules.test.yml'), 'utf8')
    for (const alert of readFileSync(rules, 'utf8').matchAll(/- alert: (\w+)/g))
      assert.match(text, new RegExp(`alertname: ${alert[1]}\\n`), `${alert[1]} has a test`)
  })

  test('every metric the rules name is one the service exports', async (t) => {
    const server = await startTestServer(t)
    const exported = await (await fetch(`${server.base}/metrics`)).text()
    const named = new Set(readFileSync(rules, 'utf8').match(/plant_store_\w+/g))
    assert.ok(named.size >= 8)
    for (const name of named)
      assert.match(exported, new RegExp(`^# TYPE ${name.replace(/_bucket$/, '')} `, 'm'), name)
  })
})
