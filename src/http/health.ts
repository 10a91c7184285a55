import type { Sql } from 'postgres'
import { migrationNames, migrationsTable } from '../db/migrate.ts'
import { withDeadline } from '../db/unavailable.ts'
import { failure } from './errors.ts'
import { type Handler, reply } from './types.ts'

/** `GET /healthz`: the process runs; the database is not consulted. */
export const healthz: Handler = () => reply({ status: 'ok' })

/** `GET /readyz`: the database answers within `deadlineMs` and has every migration applied. */
export function createReadyz(sql: Sql, deadlineMs: number): Handler {
  const expected = migrationNames()
  return async () => {
    try {
      const [row] = await withDeadline(
        sql<{ applied: number }[]>`
          select count(*)::int as applied from ${sql(migrationsTable)}
          where name = any(${expected})`,
        deadlineMs,
      )
      if (row?.applied === expected.length) return reply({ status: 'ready' })
      return failure(50301, 'the database schema is not current; migrations are pending')
    } catch {
      return failure(50301, 'the database is unavailable')
    }
  }
}
