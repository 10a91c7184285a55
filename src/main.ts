import cluster from 'node:cluster'
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import process from 'node:process'
import { runTokenCommand, tokenUsage } from './cli/token-command.ts'
import { runPrimary } from './cluster.ts'
import { type Config, ConfigError, parseConfig } from './config.ts'
import { openDatabase } from './database.ts'
import { migrate } from './db/migrate.ts'
import { createSql } from './db/sql.ts'
import { coalescedWriter, createLog, type Log } from './log.ts'
import { buildOpenApiDocument } from './openapi.ts'
import { startService } from './service.ts'

const usage =
  'usage: main.ts [serve] | migrate [up | down [N]] | token create NAME | token list | token revoke NAME | openapi [FILE]'

// The entry point: the only place that reads the environment and handles signals.
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
  if (command === 'openapi' && args.length <= 1)
    return openapiCommand(args[0] ?? 'dist/openapi.json')
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
  process.stderr.write(`${usage}\n`)
  return 1
}

async function serve(config: Config): Promise<number> {
  if (config.workers > 1 && 'Deno' in globalThis) {
    process.stderr.write(
      `plant-store: WORKERS=${config.workers} needs node:cluster, which Deno does not provide; under Deno run one process (WORKERS=1) per instance\n`,
    )
    return 1
  }
  const worker = cluster.worker
  // Workers share the primary's standard output: writes of at most PIPE_BUF stay whole.
  const out = coalescedWriter(
    (chunk) => process.stdout.write(chunk),
    worker === undefined ? undefined : 4096,
  )
  process.on('exit', out.flush)
  const log = createLog(
    config.logLevel,
    out.write,
    worker === undefined ? undefined : { worker: worker.id },
  )
  let stopping: ((signal: string) => void) | undefined
  const stopped = new Promise<string>((resolve) => {
    stopping = resolve
  })
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => stopping?.(signal))
  if (config.workers > 1 && cluster.isPrimary) return runPrimary(config, log, stopped)
  // A worker whose primary is gone (killed) stops as on SIGTERM.
  if (worker) process.on('disconnect', () => stopping?.('disconnect from the primary'))
  let service: Awaited<ReturnType<typeof startService>>
  try {
    service = await startService(config, log)
  } catch (err) {
    log.error(`the service did not start: ${err instanceof Error ? err.message : String(err)}`)
    return 1
  }
  const signal = await stopped
  log.info(`${signal} received; finishing requests in flight (at most 10 s)`)
  await service.close(10_000)
  log.info('stopped')
  return 0
}

async function openapiCommand(file: string): Promise<number> {
  await mkdir(dirname(resolve(file)), { recursive: true })
  await writeFile(file, `${JSON.stringify(buildOpenApiDocument(), null, 2)}\n`)
  process.stderr.write(`wrote the OpenAPI document to ${file}\n`)
  return 0
}

async function migrateCommand(config: Config, log: Log, args: readonly string[]): Promise<number> {
  const [direction = 'up', countText] = args
  const count = countText === undefined ? undefined : Number(countText)
  if (
    (direction !== 'up' && direction !== 'down') ||
    (count !== undefined && !(Number.isInteger(count) && count > 0))
  ) {
    process.stderr.write('usage: npm run migrate [-- up | down [N]]\n')
    return 1
  }
  const db = await openDatabase(config, log, { shareRunning: true })
  try {
    const ran = await migrate(config.databaseDirectUrl ?? db.url, log, direction, count)
    process.stdout.write(
      ran.length === 0 ? 'no migrations to run\n' : `${direction}: ${ran.join(', ')}\n`,
    )
    return 0
  } finally {
    await db.stop()
  }
}

async function tokenCommand(config: Config, log: Log, args: readonly string[]): Promise<number> {
  if (args.length === 0) {
    process.stderr.write(`${tokenUsage}\n`)
    return 1
  }
  const db = await openDatabase(config, log, { shareRunning: true })
  // Commands run on the session connection when there is one (DATABASE_DIRECT_URL).
  const url = config.databaseDirectUrl ?? db.url
  const sql = createSql(url, log, { max: 1, applicationName: 'plant-store token' })
  try {
    await migrate(url, log)
    return await runTokenCommand(
      args,
      sql,
      (line) => process.stdout.write(`${line}\n`),
      (line) => process.stderr.write(`${line}\n`),
    )
  } finally {
    await sql.end({ timeout: 5 })
    await db.stop()
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`plant-store: ${err instanceof Error ? err.message : String(err)}\n`)
    process.exit(1)
  },
)
