import process from 'node:process'
import { type Config, ConfigError, parseConfig } from './config.ts'
import { commandLog, describeError } from './log.ts'
import { scavengeOnMainThread } from './scavenge.ts'

// Before anything else runs: young-generation collections on the main thread alone.
scavengeOnMainThread()

const usage =
  'usage: main.ts [serve] | migrate [up | down [N]] | token create|rotate|list|revoke … | grant ROLE | openapi [FILE]'

// The entry point: reads the environment (through parseConfig, the one reader of it) and runs
// the command asked for (cli/serve.ts handles the signals of a running service). Each command is
// imported when asked for: `token` and `migrate` do not load the HTTP service (0.1 to 0.2 s of
// CPU at each start).
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
  if (command === 'serve' && args.length === 0)
    return (await import('./cli/serve.ts')).serve(config)
  if (command === 'openapi' && args.length <= 1)
    return (await import('./cli/openapi.ts')).openapiCommand(args[0])
  // Commands keep standard output for their result; their log goes to standard error. A reader
  // that goes away early (`| head`) must not end the command before it stops what it started.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err
  })
  const log = commandLog(config.logLevel, (l) => process.stderr.write(l))
  if (command === 'migrate')
    return (await import('./cli/migrate.ts')).migrateCommand(config, log, args)
  if (command === 'token') return (await import('./cli/token.ts')).tokenCommand(config, log, args)
  if (command === 'grant') return (await import('./cli/grant.ts')).grantCommand(config, log, args)
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
