import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Cleanup } from './database.ts'

/**
 * The temporary folder on a disk: test/run.ts puts the run's others on a RAM filesystem where it
 * can (`ramTempDir`). For a server whose commits must wait for a disk's flush, and for what Deno
 * reads and writes (it refuses paths under `/dev` without `--allow-all`).
 */
export const diskTempDir = (): string => process.env.PLANT_STORE_DISK_TMPDIR || tmpdir()

/**
 * A new folder in the system's temporary folder that the embedded PostgreSQL can use: mkdtemp
 * makes it 0700, but started as root the server runs as user postgres, which must enter it.
 */
export async function makeTempDir(prefix: string, parent = tmpdir()): Promise<string> {
  const dir = await mkdtemp(join(parent, prefix))
  await chmod(dir, 0o755)
  return dir
}

/**
 * A temporary folder (in `parent`, by default the system's) removed after `t`. Cleanups registered with the returned `after` (pass it
 * wherever a `Cleanup` is asked for) run first, last registered first: a server whose data is in
 * the folder is stopped before the folder is removed under it.
 */
export async function tempDir(
  t: Cleanup,
  prefix: string,
  parent?: string,
): Promise<{ dir: string } & Cleanup> {
  const dir = await makeTempDir(prefix, parent)
  const cleanups: (() => unknown)[] = []
  t.after(async () => {
    const failures: unknown[] = []
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup()
      } catch (err) {
        failures.push(err)
      }
    }
    await rm(dir, { recursive: true, force: true })
    if (failures.length > 0) throw failures[0]
  })
  return { dir, after: (fn) => void cleanups.push(fn) }
}
