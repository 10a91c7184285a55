import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { coalescedWriter, createLog } from '../src/log.ts'
import { projectDir } from './helpers/cli.ts'

describe('log lines', () => {
  test('each line is one JSON object: time, level, message, then the fields that are set', () => {
    const lines: string[] = []
    const log = createLog('debug', (line) => lines.push(line))
    const before = Date.now()
    log.info('request', {
      requestId: 'r-1',
      path: '/plants?q="x"\n\\',
      status: 200,
      durationMs: 1.25,
      error: undefined,
      ok: true,
    })
    log.warn('quoted "message"\u2028')
    log.error('no fields', {})
    const after = Date.now()
    assert.ok(lines.every((l) => l.endsWith('}\n') && !l.slice(0, -1).includes('\n')))
    const [first, second, third] = lines.map((l) => JSON.parse(l) as Record<string, unknown>)
    assert.deepEqual(Object.keys(first ?? {}), [
      'time',
      'level',
      'message',
      'requestId',
      'path',
      'status',
      'durationMs',
      'ok',
    ])
    assert.deepEqual(
      { ...first, time: undefined },
      {
        time: undefined,
        level: 'info',
        message: 'request',
        requestId: 'r-1',
        path: '/plants?q="x"\n\\',
        status: 200,
        durationMs: 1.25,
        ok: true,
      },
    )
    assert.deepEqual(
      { level: second?.level, message: second?.message },
      { level: 'warn', message: 'quoted "message"\u2028' },
    )
    assert.deepEqual(Object.keys(third ?? {}), ['time', 'level', 'message'])
    for (const line of [first, second, third]) {
      const time = Date.parse(String(line?.time))
      assert.match(String(line?.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      assert.ok(time >= before && time <= after)
    }
  })

  test('lines below the level are dropped', () => {
    const lines: string[] = []
    const log = createLog('warn', (line) => lines.push(line))
    log.debug('a')
    log.info('b')
    log.warn('c')
    assert.deepEqual(
      lines.map((l) => (JSON.parse(l) as { message: string }).message),
      ['c'],
    )
  })

  test('the coalescing writer joins one turn of lines into writes of at most 4,096 bytes, a longer line alone, all in order', async () => {
    const chunks: string[] = []
    const out = coalescedWriter((chunk) => chunks.push(chunk), 4096)
    const lines = Array.from({ length: 300 }, (_, i) => `${'é'.repeat(i % 37)}line ${i}\n`)
    const long = `${'x'.repeat(5000)}\n`
    lines.splice(150, 0, long)
    for (const line of lines) out.write(line)
    await new Promise((r) => setImmediate(r))
    assert.equal(chunks.join(''), lines.join(''))
    assert.ok(chunks.length > 1)
    for (const chunk of chunks) {
      if (chunk === long) continue
      assert.ok(Buffer.byteLength(chunk) <= 4096, `a write of ${Buffer.byteLength(chunk)} bytes`)
      assert.ok(chunk.endsWith('\n'), 'a write ends inside a line')
    }
    assert.ok(chunks.includes(long), 'the 5,001-byte line is written alone')
    // Each write but the last was full: the first line of the next would not have fitted.
    for (const [i, chunk] of chunks.slice(0, -1).entries()) {
      const next = `${(chunks[i + 1] ?? '').split('\n')[0]}\n`
      assert.ok(
        Buffer.byteLength(chunk) + Buffer.byteLength(next) > 4096,
        `write ${i} was not full`,
      )
    }
  })

  test('without a bound, the lines of one turn go out in one write', async () => {
    const chunks: string[] = []
    const out = coalescedWriter((chunk) => chunks.push(chunk))
    for (let i = 0; i < 1000; i++) out.write(`${'y'.repeat(50)} ${i}\n`)
    assert.deepEqual(chunks, [])
    await new Promise((r) => setImmediate(r))
    assert.equal(chunks.length, 1)
    out.write('next turn\n')
    out.flush()
    assert.deepEqual(chunks.slice(1), ['next turn\n'])
  })
})

describe('the lines an operator may alert on (docs/observability.md)', () => {
  const srcDir = join(projectDir, 'src')
  const sources = readdirSync(srcDir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => readFileSync(join(srcDir, f), 'utf8'))
  // The first argument of every log.warn and log.error: a literal, or a name (a message passed in).
  const written = sources.flatMap((text) =>
    [
      ...text.matchAll(
        /log\.(?:warn|error)\(\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|(`[^`]*`)|\w+)/g,
      ),
    ].map((m) => m[1] ?? m[2] ?? m[3]),
  )
  const docs = readFileSync(join(projectDir, 'docs', 'observability.md'), 'utf8')
  const table = docs.slice(docs.indexOf('## Log lines to alert on'))
  // The code spans of the table's first column: a message, or its start before ` …`.
  const listed = table
    .split('\n')
    .filter((l) => l.startsWith('| `'))
    .flatMap((l) => [...(l.split(' | ')[0] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? ''))
  const matches = (message: string, entry: string) =>
    entry.endsWith(' …') ? message.startsWith(entry.slice(0, -2)) : message === entry

  test('every message, at every level, is a fixed sentence, its values in fields', () => {
    // The first argument of every log call, up to its first comma or parenthesis: a template
    // with a value in it (or a choice between such templates) is a message that changes.
    const firsts = sources.flatMap((text) =>
      [...text.matchAll(/\blog\.(?:debug|info|warn|error)\(\s*(`[^`]*`|[^,)]*)/g)].map(
        (m) => m[1] ?? '',
      ),
    )
    assert.ok(firsts.length >= 60, `only ${firsts.length} log calls found`)
    assert.deepEqual(
      firsts.filter((m) => m.includes('`') && m.includes('${')),
      [],
    )
  })

  test('the table lists every warn and error message the code writes, and nothing else', () => {
    const messages = written
      .filter((m): m is string => m !== undefined)
      .map((m) => m.replace(/^`|`$/g, ''))
    assert.ok(messages.length >= 30, `only ${messages.length} messages found`)
    assert.deepEqual(
      messages.filter((m) => !listed.some((entry) => matches(m, entry))),
      [],
      'written, not listed',
    )
    const code = sources.join('\n')
    assert.deepEqual(
      listed.filter((entry) => !code.includes(entry.endsWith(' …') ? entry.slice(0, -2) : entry)),
      [],
      'listed, not written',
    )
  })
})
