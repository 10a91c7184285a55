import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { projectDir } from './helpers/cli.ts'

// docs/promises.md indexes the README's promises: each row quotes one as the README words it,
// names its section, and names the test that holds it. This file holds the index to both sides:
// the quote must still be in that section of the README, the test must still exist, and every
// sentence of the README that makes a promise (a time, a status, an exit code, "never",
// "within", …) must quote-match some row.

const readme = readFileSync(join(projectDir, 'README.md'), 'utf8')
const index = readFileSync(join(projectDir, 'docs', 'promises.md'), 'utf8')

type Row = { section: string; quote: string; file: string; name: string; line: number }

/** The rows of the index's table: | section | "quote" | `file`: name |. */
function indexRows(): Row[] {
  const rows: Row[] = []
  index.split('\n').forEach((text, i) => {
    const cells = /^\| ([^|]+) \| "(.+)" \| `([^`]+)`: (.+) \|$/.exec(text)
    if (cells === null) return
    const [, section = '', quote = '', file = '', name = ''] = cells
    rows.push({ section: section.trim(), quote, file, name: name.trim(), line: i + 1 })
  })
  return rows
}

/** The README's text under a `## ` or `### ` heading, to the next heading. */
function section(heading: string): string | undefined {
  const lines = readme.split('\n')
  const start = lines.findIndex((l) => /^#{2,3} /.test(l) && l.replace(/^#+ /, '') === heading)
  if (start < 0) return undefined
  const end = lines.findIndex((l, i) => i > start && /^#{2,3} /.test(l))
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n')
}

/** The sections whose words are promises; the rest (layout, documents, commands) are not. */
const promising = ['The two commands', 'The API in one screen', 'Tokens', 'Configuration', 'Limits']

/** Words that make a sentence a promise someone could check. */
const promiseWords =
  /\b(never|within|without|exit status|at most|at once|only|every|exactly|closed|refused|ignored|kept|stops?|warns|[1-5]\d\d|\d+ (s|ms|KiB))\b/

/** Each table row, and each sentence of prose, of a section, with its code blocks left out. */
function units(text: string): string[] {
  const out: string[] = []
  const prose: string[] = []
  let inCode = false
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) inCode = !inCode
    else if (inCode) continue
    else if (line.startsWith('|')) {
      if (!/^\|[-| ]+\|$/.test(line)) out.push(line)
    } else prose.push(line)
  }
  for (const sentence of prose.join(' ').split(/(?<=[.:;])\s+(?=[A-Z`*-])/))
    if (sentence.trim() !== '') out.push(sentence.trim())
  return out
}

describe('the promises of the README, each held by a test (docs/promises.md)', () => {
  const rows = indexRows()

  test('every row of docs/promises.md quotes its README section as it stands, and names a test that exists', () => {
    assert.ok(rows.length > 50, `${rows.length} rows read`)
    const problems: string[] = []
    for (const row of rows) {
      const text = section(row.section)
      if (text === undefined) problems.push(`line ${row.line}: no README section "${row.section}"`)
      else if (!text.replace(/\s+/g, ' ').includes(row.quote))
        problems.push(`line ${row.line}: README, ${row.section} no longer says "${row.quote}"`)
      const path = join(projectDir, row.file)
      if (!existsSync(path)) problems.push(`line ${row.line}: no file ${row.file}`)
      else if (!readFileSync(path, 'utf8').includes(row.name))
        problems.push(`line ${row.line}: ${row.file} has no test "${row.name}"`)
    }
    assert.deepEqual(problems, [])
  })

  test('every sentence or table row of the README that makes a promise is quoted by a row', () => {
    const problems: string[] = []
    for (const heading of promising) {
      const text = section(heading)
      assert.ok(text !== undefined, `README has no section "${heading}"`)
      for (const unit of units(text)) {
        if (!promiseWords.test(unit)) continue
        const flat = unit.replace(/\s+/g, ' ')
        if (!rows.some((r) => r.section === heading && flat.includes(r.quote)))
          problems.push(`${heading}: ${flat.slice(0, 160)}`)
      }
    }
    assert.deepEqual(problems, [], 'promises with no test in docs/promises.md')
  })
})
