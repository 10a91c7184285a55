import { isIP } from 'node:net'
import { limits } from '../limits.ts'

/**
 * A token bucket per key: `capacity` requests at once, refilled at `capacity` per `windowSeconds`.
 * At most `maxKeys` keys are kept (the oldest go first), so a flood of keys cannot grow memory.
 */
export function createBuckets(
  capacity: number,
  windowSeconds: number,
  maxKeys: number = limits.rateLimitKeys,
) {
  const perMs = capacity / (windowSeconds * 1000)
  const buckets = new Map<string, { tokens: number; at: number }>()
  const level = (key: string, now: number) => {
    const b = buckets.get(key)
    if (b === undefined) return capacity
    return Math.min(capacity, b.tokens + (now - b.at) * perMs)
  }
  return {
    capacity,
    windowSeconds,
    /** Whether one more is allowed now; takes it if so. */
    take(key: string, now = performance.now()): boolean {
      const tokens = level(key, now)
      if (tokens < 1) return false
      buckets.delete(key)
      buckets.set(key, { tokens: tokens - 1, at: now })
      if (buckets.size > maxKeys) buckets.delete(buckets.keys().next().value as string)
      return true
    },
    /** What remains now, whole requests. */
    remaining(key: string, now = performance.now()): number {
      return Math.floor(level(key, now))
    },
    /** Seconds until one more is allowed (0 if it is now), rounded up. */
    retryAfter(key: string, now = performance.now()): number {
      const tokens = level(key, now)
      return tokens >= 1 ? 0 : Math.ceil((1 - tokens) / perMs / 1000)
    },
    /** Seconds until the bucket is full again, rounded up. */
    resetIn(key: string, now = performance.now()): number {
      return Math.ceil((capacity - level(key, now)) / perMs / 1000)
    },
  }
}

/** A bucket per key, as `createBuckets` makes it. */
export type Buckets = ReturnType<typeof createBuckets>

/**
 * The client's address: the peer's, or, when the peer is a proxy listed in `trusted`, the
 * nearest address of `X-Forwarded-For` that is not itself a trusted proxy (the farther ones are
 * whatever the client chose to send).
 */
export function clientAddress(
  peer: string | undefined,
  forwardedFor: string | string[] | undefined,
  trusted: ReadonlySet<string>,
): string | undefined {
  if (peer === undefined || !trusted.has(peer) || forwardedFor === undefined) return peer
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor)
    .split(',')
    .map((h) => h.trim())
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = hops[i] ?? ''
    if (isIP(hop) === 0) return peer
    if (!trusted.has(hop)) return hop
  }
  return peer
}
