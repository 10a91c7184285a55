import { limits } from '../limits.ts'
import { type Refusal, refusal } from '../outcome.ts'

const units = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

/** Whole days in `ms`. */
const days = (ms: number) => ms / units.d

/** A duration written `<n>s`, `<n>m`, `<n>h` or `<n>d` (`90d`, `12h`, `30s`), in ms. */
export function parseDuration(text: string): number | Refusal {
  const m = /^(\d{1,9})([smhd])$/.exec(text)
  if (!m)
    return refusal(
      `${JSON.stringify(text)} is not a duration: write <n>s, <n>m, <n>h or <n>d (90d, 12h, 30s)`,
    )
  return Number(m[1]) * units[m[2] as keyof typeof units]
}

/**
 * When a token made now with `--expires-in TEXT` expires: `null` for `never`; the default
 * lifetime when `text` is undefined. More than 365 days, or none at all, is refused.
 */
export function expiryOf(text: string | undefined, now = Date.now()): Date | null | Refusal {
  if (text === 'never') return null
  if (text === undefined) return new Date(now + limits.tokens.lifetime)
  const ms = parseDuration(text)
  if (typeof ms !== 'number') return ms
  if (ms <= 0) return refusal(`--expires-in ${text}: a token must live more than no time`)
  if (ms > limits.tokens.maxLifetime)
    return refusal(
      `--expires-in ${text} is more than ${days(limits.tokens.maxLifetime)} days; the longest lifetime is ${days(limits.tokens.maxLifetime)}d (or never, which is warned about)`,
    )
  return new Date(now + ms)
}

/**
 * When the token a rotation replaces stops working, given `--grace TEXT`: 24 hours when `text`
 * is undefined, at once for `0s`; more than 7 days is refused.
 */
export function graceEndOf(text: string | undefined, now = Date.now()): Date | Refusal {
  if (text === undefined) return new Date(now + limits.tokens.grace)
  const ms = parseDuration(text)
  if (typeof ms !== 'number') return ms
  if (ms > limits.tokens.maxGrace)
    return refusal(
      `--grace ${text} is more than 7 days; the longest grace is 7d (0s ends it at once)`,
    )
  return new Date(now + ms)
}

/** `in N days` (or hours, minutes) from now, for a person reading a command's output. */
export function fromNow(at: Date, now = Date.now()): string {
  const ms = at.getTime() - now
  if (ms >= 2 * 86_400_000) return `in ${Math.round(ms / 86_400_000)} days`
  if (ms >= 2 * 3_600_000) return `in ${Math.round(ms / 3_600_000)} hours`
  return `in ${Math.max(0, Math.round(ms / 60_000))} minutes`
}

/** A token's state as `list` shows it, at `now`. */
export function tokenState(
  t: { expiresAt: Date | null; revokedAt: Date | null; replacedAt: Date | null },
  now = Date.now(),
): string {
  if (t.revokedAt !== null && t.revokedAt.getTime() <= now) return 'revoked'
  if (t.revokedAt !== null) return `rotated: ends ${t.revokedAt.toISOString()}`
  if (t.expiresAt === null) return 'active'
  const left = t.expiresAt.getTime() - now
  if (left <= 0) return 'expired'
  if (left <= limits.tokens.warnBefore) return `expires in ${Math.ceil(left / 86_400_000)}d`
  return 'active'
}
