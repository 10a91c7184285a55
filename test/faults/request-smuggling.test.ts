import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { statusLinesOf } from '../helpers/raw-http.ts'
import { startTestServer, uniqueId } from '../helpers/server.ts'
import { sleep } from '../helpers/wait.ts'

// Requests whose framing hides a second one, sent on raw sockets.

const s = await startTestServer({ after })
const auth = `Authorization: Bearer ${s.token}\r\n`
const json = 'Content-Type: application/json\r\n'
const statusesOf = (bytes: string) => statusLinesOf(s.base, bytes)

async function stored(id: number): Promise<boolean> {
  return (await s.db.sql`select 1 from plants where id = ${id}`).length === 1
}

describe('abuse: request smuggling is refused (regression cases)', () => {
  // Each is a create whose body hides a second request; Node's parser (llhttp) refuses the
  // framing with 400 and closes the connection, and neither the outer nor the hidden create runs.
  const hidden = (id: number) => {
    const body = JSON.stringify({ id, name: 'smuggled' })
    return `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Content-Length: ${body.length}\r\n\r\n${body}`
  }
  const variants: [string, (inner: string) => string][] = [
    [
      'Content-Length and Transfer-Encoding together',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${inner}`,
    ],
    [
      'two different Content-Length values',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Content-Length: 2\r\nContent-Length: ${inner.length + 2}\r\n\r\n{}${inner}`,
    ],
    [
      'Transfer-Encoding other than chunked last',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n${inner}`,
    ],
    [
      'an obs-folded Transfer-Encoding',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${inner}`,
    ],
    [
      'a space before the colon',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n${inner}`,
    ],
    [
      'a chunk size that is not hex',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Transfer-Encoding: chunked\r\n\r\nzz\r\n${inner}\r\n0\r\n\r\n`,
    ],
    [
      'a bare LF line ending in the headers',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\nContent-Length: ${inner.length}\r\n${auth}${json}\r\n${inner}`,
    ],
    [
      'a negative Content-Length',
      (inner) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}${json}Content-Length: -1\r\n\r\n${inner}`,
    ],
  ]
  for (const [name, wrap] of variants) {
    test(`400 and nothing stored: ${name}`, async () => {
      const id = uniqueId()
      const statuses = await statusesOf(wrap(hidden(id)))
      assert.ok(statuses.length >= 1 && statuses[0] === 400, `answers: ${statuses}`)
      assert.ok(!statuses.includes(200), `answers: ${statuses}`)
      await sleep(200)
      assert.equal(await stored(id), false)
    })
  }
})
