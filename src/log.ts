import { writeSync } from 'node:fs'

/** The log levels, least severe first. */
export const logLevels = ['debug', 'info', 'warn', 'error'] as const
export type LogLevel = (typeof logLevels)[number]

/** Fields of one log line besides time, level and message. */
export type LogFields = Record<string, string | number | boolean | undefined>

/** A logger writing one JSON object per line. */
export type Log = {
  readonly debug: (message: string, fields?: LogFields) => void
  readonly info: (message: string, fields?: LogFields) => void
  readonly warn: (message: string, fields?: LogFields) => void
  readonly error: (message: string, fields?: LogFields) => void
  readonly enabled: (level: LogLevel) => boolean
}

// The time as ISO 8601, made once per millisecond: under load many lines share one, and
// toISOString costs about as much as the rest of a request's line.
let lastMs = Number.NaN
let lastIso = ''
function isoNow(): string {
  const now = Date.now()
  if (now !== lastMs) {
    lastMs = now
    lastIso = new Date(now).toISOString()
  }
  return lastIso
}

/**
 * The log of a command (migrate, token, grant) on standard error: `info`, the default level, is
 * raised to `warn`, so that a command writes only what went wrong unless LOG_LEVEL asks for more.
 */
export const commandLog = (level: LogLevel, write: (line: string) => void): Log =>
  createLog(level === 'info' ? 'warn' : level, write)

/** Creates a logger that drops lines below `level` and hands each line to `write`. */
export function createLog(
  level: LogLevel,
  write: (line: string) => void,
  /** Fields written on every line, after the message (e.g. the worker). */
  fixed?: LogFields,
): Log {
  const always = fixed === undefined ? '' : `,${JSON.stringify(fixed).slice(1, -1)}`
  const threshold = logLevels.indexOf(level)
  const enabled = (l: LogLevel) => logLevels.indexOf(l) >= threshold
  const at = (l: LogLevel) =>
    enabled(l)
      ? (message: string, fields?: LogFields) => {
          // The same object as JSON.stringify({ time, level, message, ...fields }) would write,
          // without copying the fields into a new object (fields never repeat these three).
          const rest = fields === undefined ? '' : JSON.stringify(fields).slice(1, -1)
          write(
            `{"time":"${isoNow()}","level":"${l}","message":${JSON.stringify(message)}${always}${rest === '' ? '' : `,${rest}`}}\n`,
          )
        }
      : () => {}
  return Object.freeze({
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    enabled,
  })
}

/**
 * Coalesces the lines written during one turn of the event loop into one write: under load, one
 * system call for many request lines. Call the returned `flush` before the process exits.
 * `maxBytes` bounds each write: processes sharing one pipe (WORKERS) need writes of at most
 * PIPE_BUF (4096) bytes, which the kernel never interleaves; a longer line is written alone.
 */
export function coalescedWriter(
  write: (chunk: string) => void,
  maxBytes = Number.POSITIVE_INFINITY,
): {
  write: (line: string) => void
  flush: () => void
} {
  let pending = ''
  let pendingBytes = 0
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (pending === '') return
    const chunk = pending
    pending = ''
    pendingBytes = 0
    write(chunk)
  }
  const bounded = maxBytes !== Number.POSITIVE_INFINITY
  return {
    write(line) {
      if (bounded) {
        const bytes = Buffer.byteLength(line)
        if (pendingBytes + bytes > maxBytes) flush()
        pendingBytes += bytes
      }
      pending += line
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    },
    flush,
  }
}

/**
 * An error as text, the one way the service writes one (log fields, messages): its message (with
 * `stack`, its stack, for a fault to report), or the thrown value itself.
 */
export function describeError(err: unknown, { stack = false }: { stack?: boolean } = {}): string {
  if (!(err instanceof Error)) return String(err)
  return stack ? (err.stack ?? err.message) : err.message
}

let droppedLines = 0

/** Log lines this process could not write to its destination (a full disk, a reader gone). */
export function droppedLogLines(): number {
  return droppedLines
}

const linesIn = (text: string) => {
  let lines = 0
  for (let at = text.indexOf('\n'); at !== -1; at = text.indexOf('\n', at + 1)) lines++
  return lines
}

/**
 * Writes log text to file descriptor `fd` (standard output) so that its destination can never
 * stop the service: a write that fails (ENOSPC on a full disk, EPIPE when the reader is gone,
 * EIO, EAGAIN on a pipe that is full and non-blocking) drops the text and counts its lines
 * (`droppedLogLines`, a metric), and never throws or emits an error. One line to `notice`
 * (standard error) when lines begin to be dropped, and one when a write succeeds again, with
 * how many were dropped; a line cut by a partial write is ended, so that the next one starts on
 * a line of its own. Synchronous, as Node writes to a file or a pipe on Linux anyway: a failed
 * write returns at once.
 */
export function logDestination(
  fd: number,
  notice: (text: string) => void = (text) => {
    try {
      writeSync(2, text)
    } catch {
      // Standard error is broken too: nothing more to say.
    }
  },
): (chunk: string) => void {
  let failing: { since: number; dropped: number } | undefined
  let cutLine = false
  return (chunk) => {
    const buffer = Buffer.from(cutLine ? `\n${chunk}` : chunk)
    let written = 0
    try {
      while (written < buffer.length) written += writeSync(fd, buffer, written)
      cutLine = false
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? String(err)
      // A partial write leaves the start of a line behind: the next write ends it first.
      if (written > 0) cutLine = true
      const lines = linesIn(chunk)
      droppedLines += lines
      if (failing === undefined) {
        failing = { since: Date.now(), dropped: 0 }
        notice(
          `plant-store: the log cannot be written to its destination (${code}); its lines are dropped and counted in plant_store_log_lines_dropped_total until it can\n`,
        )
      }
      failing.dropped += lines
      return
    }
    if (failing !== undefined) {
      notice(
        `plant-store: the log is written again, after ${Math.round((Date.now() - failing.since) / 1000)} s in which ${failing.dropped} lines were dropped\n`,
      )
      failing = undefined
    }
  }
}
