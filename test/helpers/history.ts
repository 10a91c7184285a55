import type { KeptAliveClient } from './drive.ts'

// A history of creates sent under faults, and the judge that holds it against the table: what a
// Jepsen-style checker asks of an idempotent create, one rule per property the issue names.

/** What a create sent: the id and the contents. */
export type Sent = { readonly id: string; readonly name: string; readonly tag: string | null }

/** How a create ended: a status, a reset connection, or no end within the client's limit. */
export type Ending = number | 'reset' | 'timeout'

/** One create: sent, and how and when it ended. */
export type Op = {
  readonly plant: Sent
  /** `fresh`: a new id; `retry`: the exact body of an earlier create; `conflict`: an earlier id with other contents. */
  readonly kind: 'fresh' | 'retry' | 'conflict' | 'final retry'
  readonly sentAt: number
  readonly answeredAt: number
  readonly ending: Ending
  /** The answer's `error` member, when it had one. */
  readonly error?: number | undefined
  readonly retryAfter?: string | null
  /** The answer's body, parsed, for a 200. */
  readonly body?: unknown
}

/** A small seeded generator (mulberry32): the same seed, the same run. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** `items` in an order drawn from `random` (Fisher-Yates): the same generator, the same order. */
export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const order = [...items]
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    ;[order[i], order[j]] = [order[j] as T, order[i] as T]
  }
  return order
}

/**
 * Sends one create through `client` (`keptAliveClient`, on the service's `/plants`) and records
 * how it ended (15 s at most).
 */
export async function sendCreate(
  client: KeptAliveClient,
  token: string,
  plant: Sent,
  kind: Op['kind'],
): Promise<Op> {
  const sentAt = performance.now()
  const body = `{"id":${plant.id},"name":${JSON.stringify(plant.name)}${plant.tag === null ? '' : `,"tag":${JSON.stringify(plant.tag)}`}}`
  const signal = AbortSignal.timeout(15_000)
  try {
    const res = await client.post(
      body,
      { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      signal,
    )
    const text = res.text
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = text
    }
    return {
      plant,
      kind,
      sentAt,
      answeredAt: performance.now(),
      ending: res.status,
      error: (parsed as { error?: number } | undefined)?.error,
      retryAfter: res.retryAfter,
      body: parsed,
    }
  } catch {
    const timedOut = signal.aborted
    return {
      plant,
      kind,
      sentAt,
      answeredAt: performance.now(),
      ending: timedOut ? 'timeout' : 'reset',
    }
  }
}

/** The contents of a create as one comparable string. */
const contents = (p: { name: string; tag: string | null }) => JSON.stringify([p.name, p.tag])

/** Whether a create's outcome is unknown: it may or may not have been stored. */
export const indeterminate = (op: Op) => op.ending !== 200 && op.ending !== 400

/** A time in the run that the judge checks recovery from: the end of a fault. */
export type Heal = { readonly fault: string; readonly at: number }

/**
 * Holds a history against the rows stored (by id) and returns every violation, each a line:
 * - every answer is well-formed: 200 with the contents sent; 400 only as 40009; 503 only as
 *   50301 with `Retry-After: 1`; a reset only within `resetWindows` (a worker killed); nothing
 *   later than `deadlineMs`, no request left without an end;
 * - acknowledged = stored: every 200 is the stored row of its id;
 * - one winner: every 200 of an id has the same contents;
 * - 40009 only for a real conflict: the stored row of its id has other contents;
 * - no row from nowhere: every stored row was sent;
 * - recovery: a 200 answered within `recoveryMs` of every heal.
 */
export function judge(
  history: readonly Op[],
  stored: ReadonlyMap<string, { name: string; tag: string | null }>,
  {
    heals,
    resetWindows,
    deadlineMs,
    recoveryMs,
  }: {
    heals: readonly Heal[]
    resetWindows: readonly [number, number][]
    deadlineMs: number
    recoveryMs: number
  },
): string[] {
  const problems: string[] = []
  const say = (op: Op, what: string) =>
    problems.push(
      `${what}: ${op.kind} create of ${op.plant.id} ${contents(op.plant)}, sent at ${Math.round(op.sentAt)} ms, ended ${JSON.stringify(op.ending)} after ${Math.round(op.answeredAt - op.sentAt)} ms`,
    )
  const sent = new Map<string, Set<string>>()
  for (const op of history) {
    const of = sent.get(op.plant.id) ?? new Set<string>()
    of.add(contents(op.plant))
    sent.set(op.plant.id, of)
  }
  for (const op of history) {
    const row = stored.get(op.plant.id)
    const took = op.answeredAt - op.sentAt
    if (took > deadlineMs) say(op, `an answer later than ${deadlineMs} ms`)
    if (op.ending === 'timeout') say(op, 'no answer and no reset within 15 s')
    else if (op.ending === 'reset') {
      if (!resetWindows.some(([from, to]) => op.sentAt <= to && op.answeredAt >= from))
        say(op, 'a reset with no worker killed')
    } else if (op.ending === 200) {
      const body = op.body as { name?: unknown; tag?: unknown }
      if (body.name !== op.plant.name || (body.tag ?? null) !== op.plant.tag)
        say(op, `a 200 whose body is not what was sent (${JSON.stringify(op.body)})`)
      if (row === undefined) say(op, 'acknowledged but not stored')
      else if (contents(row) !== contents(op.plant))
        say(op, `acknowledged but another row stored (${contents(row)})`)
    } else if (op.ending === 400) {
      if (op.error !== 40009) say(op, `400 with error ${op.error}`)
      else if (row === undefined) say(op, '40009 for an id that is not stored')
      else if (contents(row) === contents(op.plant)) say(op, '40009 for the stored contents')
    } else if (op.ending === 503) {
      if (op.error !== 50301 || op.retryAfter !== '1')
        say(op, `503 with error ${op.error} and Retry-After ${op.retryAfter}`)
    } else say(op, `status ${op.ending}`)
  }
  for (const [id, row] of stored) {
    if (!sent.get(id)?.has(contents(row)))
      problems.push(`a row from nowhere: ${id} ${contents(row)}`)
  }
  const acknowledgedAt = history
    .filter((op) => op.ending === 200)
    .map((op) => op.answeredAt)
    .sort((a, b) => a - b)
  for (const heal of heals) {
    const first = acknowledgedAt.find((at) => at >= heal.at)
    if (first === undefined || first - heal.at > recoveryMs)
      problems.push(
        `no 200 within ${recoveryMs} ms of the end of ${heal.fault} (first ${first === undefined ? 'never' : `${Math.round(first - heal.at)} ms after`})`,
      )
  }
  return problems
}

/** A fault as the run made it: its name, when it began, and when it ended (`performance.now()`). */
export type FaultSpan = { readonly fault: string; readonly from: number; readonly to: number }

/**
 * The 503s of `history` by the fault they fell in (a 503 answered after the fault began, for a
 * create sent before it had ended + `graceMs`), and the problems: a 503 in no fault, and a 503
 * in a fault shorter than `deadlineMs` for a create whose deadline came `recoveryMs` or more after
 * the fault ended, which the service should have waited out. A create sent as such a fault began
 * may still meet its deadline before the database is back and taking creates again (a restart
 * that took 5.8 s on a loaded machine, 2026-12-02): its 503 is the contract's.
 */
export function unavailableByFault(
  history: readonly Op[],
  faults: readonly FaultSpan[],
  {
    deadlineMs,
    graceMs = 1000,
    recoveryMs = 1000,
  }: { deadlineMs: number; graceMs?: number; recoveryMs?: number },
): { tally: Record<string, number>; problems: string[] } {
  const tally: Record<string, number> = Object.fromEntries(faults.map((f) => [f.fault, 0]))
  const problems: string[] = []
  for (const op of history) {
    if (op.ending !== 503) continue
    const span = faults.find((f) => op.answeredAt >= f.from && op.sentAt <= f.to + graceMs)
    if (span === undefined) {
      problems.push(`a 503 for ${op.plant.id} in no fault (sent at ${Math.round(op.sentAt)} ms)`)
      continue
    }
    tally[span.fault] = (tally[span.fault] ?? 0) + 1
    const left = op.sentAt + deadlineMs - span.to
    if (span.to - span.from < deadlineMs && left >= recoveryMs)
      problems.push(
        `a 503 for ${op.plant.id} in "${span.fault}", which lasted ${Math.round(span.to - span.from)} ms, less than the ${deadlineMs} ms deadline, and ended ${Math.round(left)} ms before the create's`,
      )
  }
  return { tally, problems }
}
