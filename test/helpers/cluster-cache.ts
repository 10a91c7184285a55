import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chown, mkdir, rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { ensurePostgresUser, startEmbedded } from '../../src/db/start/embedded.ts'
import { quietLog } from './database.ts'
import { makeTempDir } from './temp-dir.ts'

// New PostgreSQL clusters for the tests as copies (`cp -a`) of one made once for the whole run
// in `PLANT_STORE_TEST_CACHE`, which test/run.ts sets and removes after. The suite ran some 40
// initdbs (2026-12-03, process accounting); one of PostgreSQL 18 took 1.2 to 1.45 s of CPU on this
// machine's ext4 and 0.6 s on a tmpfs, a copy of its cluster 0.54 to 0.93 s and 0.05 to 0.08 s
// (creating its 970 files is most of either). Every copy has the same system identifier, which no
// test compares. Without the cache (a file run alone, the bench) each is made afresh.

const run = promisify(execFile)

/**
 * Whom the tests' PostgreSQL servers run as: as root, the postgres user (made if missing);
 * otherwise undefined, the test's own user.
 */
export async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined
  await ensurePostgresUser()
  const id = async (flag: string) => Number((await run('id', [flag, 'postgres'])).stdout.trim())
  return { uid: await id('-u'), gid: await id('-g') }
}

/**
 * Files running at once may each make the run's one: `make` fills a new folder in the cache,
 * the first rename to `name` wins, the others are removed. Returns the cached folder.
 */
async function cached(
  cache: string,
  name: string,
  make: (making: string) => Promise<void>,
): Promise<string> {
  const pristine = join(cache, name)
  if (existsSync(pristine)) return pristine
  const making = await makeTempDir(`making-${name}-`, cache)
  await make(making)
  await rename(making, pristine).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err
    await rm(making, { recursive: true, force: true })
  })
  return pristine
}

/**
 * A new cluster in `dataDir` (which must not exist) as `initdb ARGS` makes it, run as `user`:
 * a copy of the run's one made by the same `initdb` and arguments (`name` tells them apart).
 */
export async function initdbCopy(
  name: string,
  initdb: string,
  args: readonly string[],
  dataDir: string,
  user: { uid: number; gid: number } | undefined,
): Promise<void> {
  const cache = process.env.PLANT_STORE_TEST_CACHE
  if (!cache) {
    await run(initdb, ['-D', dataDir, ...args], { ...user })
    return
  }
  const pristine = await cached(cache, name, async (making) => {
    if (user) await chown(making, user.uid, user.gid)
    await run(initdb, ['-D', join(making, 'data'), ...args], { ...user })
  })
  // cp -a keeps the owner, the modes (0700) and the times; Node's fs.cp took 0.85 s of CPU.
  await run('cp', ['-a', join(pristine, 'data'), dataDir])
}

/**
 * Gives `dir` what `startEmbedded({ dir })` leaves after its first start (the cluster under
 * `postgres/` and its password), so that the next `startEmbedded` there starts it without an
 * initdb: for the tests whose subject is not that first initialisation. Without the cache,
 * nothing (the start initialises `dir` itself).
 */
export async function seedEmbedded(dir: string): Promise<void> {
  const cache = process.env.PLANT_STORE_TEST_CACHE
  if (!cache) return
  const pristine = await cached(cache, 'embedded', async (making) => {
    const db = await startEmbedded({ dir: making, log: quietLog, shareRunning: false, fast: true })
    await db.stop()
    await rm(join(making, 'owner.pid'), { force: true })
  })
  await mkdir(dir, { recursive: true, mode: 0o755 })
  await run('cp', ['-a', join(pristine, 'postgres'), join(pristine, 'embedded.json'), dir])
}
