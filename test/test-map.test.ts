import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'

// docs/development.md, "The tests of each module": a row for every module of src/, every test
// file in a row, and each row naming tests that can check its module.

const src = join(projectDir, 'src')
const testDir = join(projectDir, 'test')

function filesUnder(dir: string, suffix: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? filesUnder(join(dir, e.name), suffix)
      : e.name.endsWith(suffix)
        ? [join(dir, e.name)]
        : [],
  )
}

/** The files a file imports by a relative path, as absolute paths. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8')
  return [...text.matchAll(/(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) =>
    normalize(join(dirname(file), m[1] ?? '')),
  )
}

/**
 * The modules of src/ a test reaches: those it imports, itself, through test/helpers/ or through
 * other modules (static and dynamic imports alike), and, when it (or a helper it imports) runs
 * `src/main.ts` as a process, what that entry point reaches.
 */
function reach(testFile: string): Set<string> {
  const modules = new Set<string>()
  const seen = new Set<string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    const targets = importsOf(file)
    if (file.startsWith(testDir) && readFileSync(file, 'utf8').includes('src/main.ts'))
      targets.push(join(src, 'main.ts'))
    for (const target of targets) {
      if (!existsSync(target)) continue
      if (target.startsWith(src)) {
        modules.add(relative(src, target))
        visit(target)
      } else if (target.startsWith(testDir)) visit(target)
    }
  }
  visit(testFile)
  return modules
}

/** The rows of the table under `heading`: its first column, and the tests it names. */
function rowsOf(text: string, heading: string): Map<string, string[]> {
  const at = text.indexOf(heading)
  assert.ok(at >= 0, `no "${heading}" in docs/development.md`)
  const rows = new Map<string, string[]>()
  for (const line of text.slice(at).split('\n').slice(1)) {
    if (!line.startsWith('|')) break
    const m = /^\| `([^`]+)` \| (.+) \|$/.exec(line)
    if (m)
      rows.set(
        m[1] ?? '',
        [...(m[2] ?? '').matchAll(/`([^`]+)`/g)].map((t) => t[1] ?? ''),
      )
  }
  return rows
}

describe('the map from modules to their tests (docs/development.md)', () => {
  const text = readFileSync(join(projectDir, 'docs', 'development.md'), 'utf8')
  const modules = rowsOf(text, '| module (`src/…`)')
  const others = rowsOf(text, '| file | its tests')
  const testNames = filesUnder(testDir, '.test.ts').map((f) =>
    relative(testDir, f).replace(/\.test\.ts$/, ''),
  )

  test('every module of src/ has a row, and every row a module', () => {
    const problems: string[] = []
    for (const file of filesUnder(src, '.ts')) {
      const module = relative(src, file)
      if ((modules.get(module) ?? []).length === 0) problems.push(`src/${module}: no row`)
    }
    for (const module of modules.keys())
      if (!existsSync(join(src, module))) problems.push(`src/${module}: no such module`)
    for (const file of others.keys())
      if (!existsSync(join(projectDir, file))) problems.push(`${file}: no such file`)
    assert.deepEqual(problems, [])
  })

  test('every test file is in a row, and every test a row names exists', () => {
    const named = new Set([...modules.values(), ...others.values()].flat())
    assert.deepEqual(
      testNames.filter((t) => !named.has(t)),
      [],
      'test files in no row',
    )
    assert.deepEqual(
      [...named].filter((t) => !testNames.includes(t)),
      [],
      'rows naming a test that is gone',
    )
  })

  test("each test a module's row names reaches that module: imports it (itself, through test/helpers or other modules) or runs the entry point that imports it", () => {
    const problems: string[] = []
    for (const [module, tests] of modules)
      for (const t of tests) {
        const file = join(testDir, `${t}.test.ts`)
        if (!existsSync(file)) continue
        if (!reach(file).has(module)) problems.push(`${module}: ${t} does not reach it`)
      }
    assert.deepEqual(problems, [])
  })
})
