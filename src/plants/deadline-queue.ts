/** Something with a deadline (`expiresAt`, on a `Clock`'s scale). */
export type Deadlined = { readonly expiresAt: number }

/**
 * Items in the order of their deadlines, earliest first, and nothing else: no timer, no clock,
 * no answers (waiting.ts is the shell that watches it). Items of equal deadline keep the order
 * they came in, except that those merged back (`merge`) go ahead of those already waiting.
 */
export type DeadlineQueue<T extends Deadlined> = {
  /** Adds `item` after every item of an earlier or equal deadline; returns its position. */
  readonly insert: (item: T) => number
  /**
   * Merges `items` (any order) in one pass, each ahead of the items already waiting whose
   * deadline is not earlier than its own.
   */
  readonly merge: (items: readonly T[]) => void
  /** Takes the items whose deadline is at or before `now`, earliest first. */
  readonly takeExpired: (now: number) => T[]
  /** Takes up to `most` items, earliest first. */
  readonly take: (most: number) => T[]
  /** Takes the items past the first `keep`: the latest deadlines. */
  readonly takeBeyond: (keep: number) => T[]
  /** The item of the earliest deadline. */
  readonly head: () => T | undefined
  readonly size: () => number
}

export function createDeadlineQueue<T extends Deadlined>(): DeadlineQueue<T> {
  let items: T[] = []

  function insert(item: T): number {
    let at = items.length
    while (at > 0 && (items[at - 1] as T).expiresAt > item.expiresAt) at--
    items.splice(at, 0, item)
    return at
  }

  function merge(back: readonly T[]): void {
    if (back.length === 0) return
    const sorted = [...back].sort((a, b) => a.expiresAt - b.expiresAt)
    const merged: T[] = []
    let i = 0
    for (const q of items) {
      for (let p = sorted[i]; p !== undefined && p.expiresAt <= q.expiresAt; p = sorted[++i])
        merged.push(p)
      merged.push(q)
    }
    for (let p = sorted[i]; p !== undefined; p = sorted[++i]) merged.push(p)
    items = merged
  }

  function takeExpired(now: number): T[] {
    let count = 0
    while (count < items.length && (items[count] as T).expiresAt <= now) count++
    return count === 0 ? [] : items.splice(0, count)
  }

  return Object.freeze({
    insert,
    merge,
    takeExpired,
    take: (most: number) => items.splice(0, most),
    takeBeyond: (keep: number) => items.splice(Math.max(0, keep)),
    head: () => items[0],
    size: () => items.length,
  })
}
