// Runs `npm start`'s serve() with the embedded database in the folder given as argument, so a
// test can signal a real start without touching the project's `.data/`.
import process from 'node:process'
import { serve } from '../../src/cli/serve.ts'
import { parseConfig } from '../../src/config.ts'

const dir = process.argv[2]
if (!dir) throw new Error('usage: serve-child.ts DIR')
process.exit(await serve(parseConfig(process.env), { dataDir: dir }))
