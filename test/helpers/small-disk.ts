import { execFileSync } from 'node:child_process'
import { open, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Cleanup } from './database.ts'
import { makeTempDir } from './temp-dir.ts'

/** Why this machine cannot make a small filesystem, or `undefined` when it can. */
export function smallDiskUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'mounting a tmpfs needs root (CI runs as root)'
  return undefined
}

/** A filesystem of its own that a test can fill, and give the space back. */
export type SmallDisk = {
  readonly dir: string
  /** Fills what is left of it with a file of its own (to the last 4-KiB block). */
  readonly fill: () => Promise<void>
  /** Removes that file: the space is back. */
  readonly free: () => Promise<void>
}

/**
 * A tmpfs of `mb` MiB mounted on a new folder (the kernel's own full disk: ENOSPC when it is
 * full), unmounted after `t`, whose `after` cleanups run before (a server on it is stopped first).
 */
export async function smallDisk(t: Cleanup, mb: number): Promise<SmallDisk & Cleanup> {
  const dir = await makeTempDir('plant-store-disk-')
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m,mode=0755`, 'tmpfs', dir])
  const cleanups: (() => unknown)[] = []
  t.after(async () => {
    for (const cleanup of cleanups.reverse()) await Promise.resolve(cleanup()).catch(() => {})
    execFileSync('umount', ['-l', dir])
    await rm(dir, { recursive: true, force: true })
  })
  const filler = join(dir, 'filler')
  return {
    dir,
    after: (fn) => void cleanups.push(fn),
    async fill() {
      const file = await open(filler, 'a')
      try {
        for (const size of [1 << 20, 4096]) {
          const block = Buffer.alloc(size)
          for (;;) {
            try {
              await file.write(block)
            } catch (err) {
              if ((err as NodeJS.ErrnoException).code === 'ENOSPC') break
              throw err
            }
          }
        }
      } finally {
        await file.close().catch(() => {})
      }
    },
    async free() {
      await rm(filler, { force: true })
    },
  }
}
