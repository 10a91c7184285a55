import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createLog } from '../src/log.ts'

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
})
