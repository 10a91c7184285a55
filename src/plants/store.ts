import { openStatementSlots } from '../db/slots.ts'
import { leaveReadOnlyServer } from '../db/sql.ts'
import type { Log } from '../log.ts'
import {
  type BatchLimits,
  createPlantRepository,
  type PlantStore,
  type StoreHooks,
} from './repository.ts'

/**
 * Opens the plant store on `url`: a statement slot (a connection of its own, cut loose when it
 * goes silent) for each statement in flight, and the repository that batches creates into them.
 */
export function openPlantStore(
  url: string,
  log: Log,
  {
    batchLimits,
    transactionPooler,
    connectionClosed,
    statementRan,
    writePath,
  }: {
    readonly batchLimits: BatchLimits
    readonly transactionPooler: boolean
    readonly connectionClosed: () => void
  } & Required<Pick<StoreHooks, 'statementRan' | 'writePath'>>,
): { store: PlantStore; close: () => Promise<void> } {
  const slots = openStatementSlots(url, log, batchLimits.maxInFlight, {
    connectionClosed,
    transactionPooler,
  })
  const store = createPlantRepository(slots, batchLimits, {
    writePath,
    statementRan,
    readOnly: leaveReadOnlyServer(log),
    cutLoose: (slot, ms, sockets) =>
      log.warn(
        `no answer from the database for ${ms} ms; closed the connection of statement slot ${slot} and opening a new one`,
        { sockets },
      ),
  })
  return {
    store,
    async close() {
      await Promise.all(slots.map((slot) => slot.end()))
    },
  }
}
