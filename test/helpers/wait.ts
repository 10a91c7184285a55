/** Polls `check` every 20 ms until it is true; resolves with the milliseconds that took. */
export async function within(ms: number, check: () => boolean | Promise<boolean>): Promise<number> {
  const started = performance.now()
  while (performance.now() - started < ms) {
    if (await check()) return performance.now() - started
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`not true within ${ms} ms`)
}
