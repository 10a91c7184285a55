// Starts an embedded PostgreSQL in the folder given as argument, prints its URL, and waits to be
// killed: the orphan that a SIGKILLed service leaves behind. Exits non-zero if the start fails.
import { startEmbedded } from '../../src/db/start/embedded.ts'
import { createLog } from '../../src/log.ts'

const dir = process.argv[2]
if (!dir) throw new Error('usage: embedded-child.ts DIR')
const db = await startEmbedded({
  dir,
  log: createLog('warn', (l) => process.stderr.write(l)),
  shareRunning: false,
  fast: true,
})
process.stdout.write(`${db.url}\n`)
setInterval(() => {}, 1 << 30)
