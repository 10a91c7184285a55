import process from 'node:process'
import type { Config } from '../config.ts'
import type { Log } from '../log.ts'
import { onMigratedSession } from './database.ts'

/** The usage line of `npm run grant`. */
export const grantUsage = 'usage: npm run grant -- ROLE   (APP_ROLE_PASSWORD sets its password)'

/**
 * `npm run grant -- ROLE`, run as the tables' owner: applies pending migrations, creates ROLE
 * (LOGIN, with APP_ROLE_PASSWORD's password when given; a role that exists gets the new password) and grants it
 * exactly what the service needs with MIGRATE=off: INSERT and SELECT on plants, SELECT on
 * api_tokens and on the migrations table, and UPDATE of api_tokens.last_used_at alone. The statements are docs/operations.md's.
 */
export async function grantCommand(
  config: Config,
  log: Log,
  args: readonly string[],
): Promise<number> {
  const password = config.appRolePassword
  const [role, ...extra] = args
  if (role === undefined || extra.length > 0 || !/^[a-z_][a-z0-9_]{0,62}$/.test(role)) {
    process.stderr.write(`${grantUsage}\n`)
    return 1
  }
  return onMigratedSession(config, log, 'plant-store grant', async (sql) => {
    // PostgreSQL's format() quotes the names and the password: nothing is spliced here.
    const statement = async (template: string, ...values: string[]) => {
      const [row] = await sql<{ s: string }[]>`
          select format(${template}, variadic ${values}::text[]) as s`
      if (row === undefined) throw new Error(`format() returned nothing for ${template}`)
      return row.s
    }
    const [exists] = await sql`select 1 from pg_roles where rolname = ${role}`
    const [{ database } = { database: '' }] = await sql<{ database: string }[]>`
        select current_database() as database`
    const statements: string[] = []
    if (exists === undefined)
      statements.push(
        password === undefined
          ? await statement('create role %I login', role)
          : await statement('create role %I login password %L', role, password),
      )
    else if (password !== undefined)
      statements.push(await statement('alter role %I password %L', role, password))
    statements.push(
      await statement('grant connect on database %I to %I', database, role),
      await statement('grant usage on schema public to %I', role),
      await statement('grant select, insert on plants to %I', role),
      await statement('grant select on api_tokens, pgmigrations to %I', role),
      await statement('grant update (last_used_at) on api_tokens to %I', role),
    )
    for (const s of statements) await sql.unsafe(s)
    process.stderr.write(
      `role ${role} ${exists ? 'exists' : 'created'}; it may insert and read plants, read api_tokens and pgmigrations and record when a token was last used: run the service as it with MIGRATE=off\n`,
    )
    return 0
  })
}
