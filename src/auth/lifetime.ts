import { type Refusal, refusal } from '../outcome.ts'

/** How long a new token lives unless told otherwise: 90 days, as GitLab pre-fills. */
export const defaultTokenLifetimeMs = 90 * 86_400_000
/** The longest lifetime a token may be given, short of `never`: 365 days, as GitLab's cap. */
export const maxTokenLifetimeMs = 365 * 86_400_000

const units = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

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
  if (text === undefined) return new Date(now + defaultTokenLifetimeMs)
  const ms = parseDuration(text)
  if (typeof ms !== 'number') return ms
  if (ms <= 0) return refusal(`--expires-in ${text}: a token must live more than no time`)
  if (ms > maxTokenLifetimeMs)
    return refusal(
      `--expires-in ${text} is more than 365 days; the longest lifetime is 365d (or never, which is warned about)`,
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
