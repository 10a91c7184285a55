import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'

// src/main.ts calls scavengeOnMainThread() before anything else (BENCHMARKS.md, "Scavenges on the
// main thread alone"). A process that calls it, then allocates what survives a scavenge or two,
// under V8's own trace of each scavenge and of each of its tasks: the tasks a scavenge ran on.
function scavengeTasks(nodeFlags: string[]): { set: boolean; scavenges: number; tasks: number } {
  const module = join(projectDir, 'src', 'scavenge.ts')
  const code = `
    import { writeSync } from 'node:fs'
    const { scavengeOnMainThread } = await import(${JSON.stringify(module)})
    writeSync(1, 'set=' + scavengeOnMainThread() + '\\n')
    let kept = []
    for (let i = 0; i < 2_000_000; i++) {
      kept.push({ i, name: 'plant ' + i })
      if (kept.length === 100_000) kept = []
    }`
  const run = spawnSync(
    process.execPath,
    [
      ...nodeFlags,
      '--import',
      'tsx',
      '--trace-gc',
      '--trace-parallel-scavenge',
      // A young generation of a few MB from the start, so that V8 would give a scavenge more
      // than one task.
      '--min-semi-space-size=8',
      '--input-type=module',
      '--eval',
      code,
    ],
    { cwd: projectDir, encoding: 'utf8' },
  )
  assert.equal(run.status, 0, run.stderr)
  const after = run.stdout.slice(run.stdout.indexOf('set='))
  const lines = after.split('\n')
  return {
    set: lines[0] === 'set=true',
    scavenges: lines.filter((l) => / Scavenge /.test(l)).length,
    tasks: lines.filter((l) => /scavenge\[0x[0-9a-f]+\]: time=/.test(l)).length,
  }
}

describe('young-generation collections', () => {
  test('after scavengeOnMainThread each scavenge runs as one task, on the main thread', () => {
    const r = scavengeTasks([])
    assert.equal(r.set, true)
    assert.ok(r.scavenges >= 3, `only ${r.scavenges} scavenges were seen`)
    assert.equal(r.tasks, r.scavenges)
  })

  test('a process started with --parallel-scavenge keeps V8 scavenging with helper threads', () => {
    const r = scavengeTasks(['--parallel-scavenge'])
    assert.equal(r.set, false)
    assert.ok(r.scavenges >= 3, `only ${r.scavenges} scavenges were seen`)
    assert.ok(r.tasks > r.scavenges, `${r.tasks} tasks for ${r.scavenges} scavenges`)
  })
})
