import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { variables } from '../src/config.ts'
import { errorTable } from '../src/http/errors.ts'
import { formatted, limits } from '../src/limits.ts'
import { projectDir } from './helpers/cli.ts'

// The README's tables against the code's own single tables (src/config.ts `variables`,
// src/http/errors.ts `errorTable`, src/limits.ts `limits`): a row changed, added or removed on
// one side only fails here, naming the row.

const readme = readFileSync(join(projectDir, 'README.md'), 'utf8')

/** The body rows of the first table after the line that starts with `heading`, cell by cell. */
function tableAfter(heading: string): string[][] {
  const lines = readme.split('\n')
  const start = lines.findIndex((l) => l.startsWith(heading))
  assert.ok(start >= 0, `README.md has no line starting with ${heading}`)
  const rows: string[][] = []
  let i = start + 1
  while (i < lines.length && !lines[i]?.startsWith('|')) i++
  for (i += 2; i < lines.length && lines[i]?.startsWith('|'); i++) {
    rows.push(
      (lines[i] ?? '')
        .slice(1, -1)
        .split(' | ')
        .map((c) => c.trim()),
    )
  }
  return rows
}

describe("the README's tables hold to the code's", () => {
  test('the error table (README, The API in one screen) lists every code of errorTable with its status, and no other', () => {
    const rows = tableAfter('- **Errors**')
    const inReadme = new Map(rows.map(([status, code]) => [Number(code), Number(status)]))
    const problems: string[] = []
    for (const [code, { status }] of Object.entries(errorTable)) {
      const shown = inReadme.get(Number(code))
      if (shown === undefined) problems.push(`${code}: no row in the README`)
      else if (shown !== status)
        problems.push(`${code}: the README says ${shown}, the code ${status}`)
    }
    for (const code of inReadme.keys())
      if (!(code in errorTable)) problems.push(`${code}: in the README, not in errorTable`)
    assert.deepEqual(problems, [])
  })

  test("the configuration table (README, Configuration) is the code's declaration of each variable, row by row: its words and its default", () => {
    const rows = tableAfter('## Configuration')
    const inReadme = new Map(
      rows.map(([name = '', meaning = '', fallback = '']) => [name, { meaning, fallback }]),
    )
    const problems: string[] = []
    for (const [name, variable] of Object.entries(variables)) {
      const row = inReadme.get(`\`${name}\``)
      const declared = variable as { default: string | undefined; unset?: string; why?: string }
      const fallback =
        declared.default === undefined
          ? `unset${declared.unset ? `: ${declared.unset}` : ''}`
          : `\`${declared.default}\`${declared.why ? `: ${declared.why}` : ''}`
      if (row === undefined) problems.push(`${name}: no row in the README`)
      else {
        if (row.meaning !== variable.meaning)
          problems.push(`${name}: the README says "${row.meaning}", the code "${variable.meaning}"`)
        if (row.fallback !== fallback)
          problems.push(
            `${name}: the README's default is "${row.fallback}", the code's "${fallback}"`,
          )
      }
    }
    for (const name of inReadme.keys())
      if (!(name.slice(1, -1) in variables))
        problems.push(`${name}: in the README, not in variables`)
    assert.deepEqual(problems, [])
  })

  test('the limits table (README, Limits) states the numbers of limits.ts, row by row', () => {
    const s = (ms: number) => `${ms / 1000} s`
    // Each row, by the start of its first cell: what the row must say (in either cell), or null
    // for a row whose value is not a number of limits.ts.
    const expected: Record<string, string[] | null> = {
      'request body': [`${limits.bodyBytes / 1024} KiB`],
      'request headers': [s(limits.http.headers)],
      'whole request': [s(limits.http.request)],
      'idle keep-alive connection': [`timeout=${limits.http.keepAlive / 1000}`],
      'a connection on which no byte moves': [`for ${s(limits.http.stalled)}`],
      'requests of one connection': [`up to ${limits.http.pipelined} pipelined`],
      'requests behind an answer that closes the connection': null,
      'open connections': null,
      'database statement': [s(limits.database.statement), `at most ${s(limits.database.request)}`],
      'a statement with no answer for': [`for ${s(limits.database.cutLoose)}`],
      'a statement unanswered for': [`for ${s(limits.database.unacknowledged)}`],
      'opening a database connection': [s(limits.database.connect)],
      '`/readyz`': [`within ${s(limits.database.readiness)}`],
      'creates waiting for a statement': [formatted(limits.batch.maxQueued)],
      'out of file handles': null,
      'failed authentications per client address': [
        `per ${limits.authFailures.windowSeconds} s (${limits.authFailures.allowed})`,
      ],
      'requests per token': null,
      'path in a log line': null,
    }
    const rows = tableAfter('### Limits')
    const problems: string[] = []
    for (const [label = '', value = ''] of rows) {
      const key = Object.keys(expected).find((k) => label.startsWith(k))
      if (key === undefined) {
        problems.push(`"${label}": a row this test does not know; add what it must say`)
        continue
      }
      for (const text of expected[key] ?? [])
        if (!`${label} ${value}`.includes(text)) problems.push(`"${key}": does not say ${text}`)
    }
    for (const key of Object.keys(expected))
      if (!rows.some(([label = '']) => label.startsWith(key)))
        problems.push(`"${key}": no such row in the README`)
    assert.deepEqual(problems, [])
  })
})
