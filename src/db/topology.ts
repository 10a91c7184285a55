import type { Log } from '../log.ts'
import { type CitusPrimaries, followCitusPrimaries, nodeUrl } from './node.ts'
import type { Sessions } from './start/open.ts'

/**
 * Where each part of an instance connects, found once at start and then only read: the pool for
 * tokens and start-up, the session that LISTENs, the server whose settings decide the writes'
 * WAL, and on a Citus worker its group and each group's primary as pg_dist_node names it
 * (followed while the instance runs: Patroni moves them in a switchover or failover).
 */
export type Topology = {
  /** `DATABASE_URL` names a Citus worker: tokens and sessions go to its coordinator. */
  readonly citusWorker: boolean
  /** The URL of the pool for tokens and start-up. */
  readonly tokensUrl: string
  /** The URL of the session that LISTENs for token changes (through a transaction pooler). */
  readonly sessionUrl: string
  /**
   * Where each new connection of the tokens' pool goes at the time, when it follows the
   * coordinator's row in pg_dist_node (a worker given no `DATABASE_DIRECT_URL`).
   */
  readonly followTokens: (() => string) | undefined
  /** The server that takes the plants' writes, when it is not the tokens' (a Citus worker's own). */
  readonly writesUrl: string | undefined
  /** On a Citus worker: its group, and each group's primary. */
  readonly citus: { readonly group: number; readonly primaries: CitusPrimaries } | undefined
  /** Stops following pg_dist_node. */
  readonly stop: () => Promise<void>
}

/**
 * The topology of an instance whose creates go to `url`, its sessions as `sessionsOf` found
 * them: on a Citus worker, pg_dist_node's primaries are followed from `url` (the worker), the
 * tokens go to the coordinator, and the creates of each group to its primary.
 */
export async function openTopology(url: string, session: Sessions, log: Log): Promise<Topology> {
  if (!session.citusWorker)
    return {
      citusWorker: false,
      tokensUrl: url,
      sessionUrl: session.url,
      followTokens: undefined,
      writesUrl: undefined,
      citus: undefined,
      stop: async () => {},
    }
  const primaries = await followCitusPrimaries(url, log)
  const coordinator = primaries.of(0)
  return {
    citusWorker: true,
    tokensUrl: session.url,
    sessionUrl: session.url,
    followTokens:
      session.coordinatorFromMetadata && coordinator !== undefined
        ? () => nodeUrl(url, primaries.of(0) ?? coordinator)
        : undefined,
    writesUrl: url,
    citus: session.citusGroup === undefined ? undefined : { group: session.citusGroup, primaries },
    stop: primaries.stop,
  }
}
