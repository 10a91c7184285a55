import process from 'node:process'
import { grantCommand } from './cli/grant.ts'
import { migrateCommand } from './cli/migrate.ts'
import { openapiCommand } from './cli/openapi.ts'
import { serve } from './cli/serve.ts'
import { tokenCommand } from './cli/token.ts'
import { type Config, ConfigError, parseConfig } from './config.ts'
import { createLog, describeError } from './log.ts'

const usage =
  'usage: main.ts [serve] | migrate [up | down [N]] | token create|rotate|list|revoke … | grant ROLE | openapi [FILE]'

// The entry point: reads the environment (through parseConfig, the one reader of it) and runs
// the command asked for (cli/serve.ts handles the signals of a running service).
async function main(argv: readonly string[]): Promise<number> {
  let config: Config
  try {
    config = parseConfig(process.env)
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    process.stderr.write(`plant-store: ${err.message}\n`)
    return 1
  }
  const [command = 'serve', ...args] = argv
  if (command === 'serve' && args.length === 0) return serve(config)
  if (command === 'openapi' && args.length <= 1) return openapiCommand(args[0])
  // Commands keep standard output for their result; their log goes to standard error. A reader
  // that goes away early (`| head`) must not end the command before it stops what it started.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err
  })
  const log = createLog(config.logLevel === 'info' ? 'warn' : config.logLevel, (l) =>
    process.stderr.write(l),
  )
  if (command === 'migrate') return migrateCommand(config, log, args)
  if (command === 'token') return tokenCommand(config, log, args)
  if (command === 'grant') return grantCommand(config, log, args)
  process.stderr.write(`${usage}\n`)
  return 1
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`plant-store: ${describeError(err)}\n`)
    process.exit(1)
  },
)
