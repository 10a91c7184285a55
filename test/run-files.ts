// Runs the test files named, in the order named, some at a time: test/run.ts starts it as
// `node --import tsx --test-timeout=… test/run-files.ts CONCURRENCY FILE...`. Node's own
// `node --test FILE...` sorts the files by name before it runs them, so the longest files, listed
// first to start first, started wherever their names fell (2026-12-02: the last of them a minute
// before the end, and one of them left alone for the last 30 s); `run()` keeps the order it is
// given. Each file runs in a process of its own with this process's flags (`--import tsx`, the
// timeout); the report is TAP, or the spec reporter's on a terminal, as `node --test` writes it.
import process from 'node:process'
import { run } from 'node:test'
import { spec, tap } from 'node:test/reporters'

const [concurrency, ...files] = process.argv.slice(2)
const stop = new AbortController()
const stream = run({
  files,
  concurrency: Number(concurrency),
  // A file that runs past 5 minutes has hung (as `--test-timeout` for each test in it).
  timeout: 300_000,
  signal: stop.signal,
})
stream.on('test:fail', () => {
  process.exitCode = 1
})
const stopAll = () => stop.abort()
process.on('SIGINT', stopAll)
process.on('SIGTERM', stopAll)
stream.compose(process.stdout.isTTY ? new spec() : tap).pipe(process.stdout)
