import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'

// docs/development.md, "The tests of each module": a row for every module of src/, each naming
// test files that exist.

function modules(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? modules(join(dir, e.name))
      : e.name.endsWith('.ts')
        ? [relative(join(projectDir, 'src'), join(dir, e.name))]
        : [],
  )
}

describe('the map from modules to their tests (docs/development.md)', () => {
  test('every module of src/ has a row, and every test file a row names exists', () => {
    const text = readFileSync(join(projectDir, 'docs', 'development.md'), 'utf8')
    const rows = new Map(
      [...text.matchAll(/^\| `([^`]+\.ts)` \| (.+) \|$/gm)].map((m) => [
        m[1] ?? '',
        [...(m[2] ?? '').matchAll(/`([^`]+)`/g)].map((t) => t[1] ?? ''),
      ]),
    )
    const problems: string[] = []
    for (const module of modules(join(projectDir, 'src'))) {
      const tests = rows.get(module)
      if (tests === undefined || tests.length === 0) problems.push(`src/${module}: no row`)
      for (const t of tests ?? [])
        if (!existsSync(join(projectDir, 'test', `${t}.test.ts`)))
          problems.push(`src/${module}: no test/${t}.test.ts`)
    }
    for (const module of rows.keys())
      if (!existsSync(join(projectDir, 'src', module))) problems.push(`${module}: no such module`)
    assert.deepEqual(problems, [])
  })
})
