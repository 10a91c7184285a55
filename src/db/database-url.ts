import postgres from 'postgres'

// postgres[ql]://[user[:password]@]host[:port][,host[:port]...][/database][?parameters], as
// libpq writes a list of hosts. WHATWG's URL parser refuses the list, so it is split here.
const pattern = /^(postgres(?:ql)?:)\/\/(?:([^@/?#]*)@)?([^/?#]*)(.*)$/s

/**
 * One URL per host of a PostgreSQL URL, in order, each with the user, password, database and
 * parameters of the whole; `undefined` when the text is no such URL.
 */
export function hostUrls(text: string): URL[] | undefined {
  const m = pattern.exec(text)
  if (!m) return undefined
  const [, protocol, userinfo, hosts = '', rest = ''] = m
  try {
    return hosts
      .split(',')
      .map(
        (host) =>
          new URL(`${protocol}//${userinfo === undefined ? '' : `${userinfo}@`}${host}${rest}`),
      )
  } catch {
    return undefined
  }
}

/** Where a database URL points, without its password: `host:port[,host:port]/database as user`. */
export function describeDatabase(text: string): string {
  const urls = hostUrls(text) ?? []
  const first = urls[0]
  if (first === undefined) return 'an invalid database URL'
  const hosts = urls.map((u) => `${u.hostname}:${u.port || '5432'}`).join(',')
  return `${hosts}${first.pathname} as ${decodeURIComponent(first.username) || 'the default user'}`
}

/**
 * The URL of the one writable server of a URL with several hosts (the first that is neither in
 * recovery nor read-only), for tools that take one host, such as node-pg-migrate. A URL with one
 * host is returned as it is.
 */
export async function primaryUrl(text: string): Promise<string> {
  const urls = hostUrls(text)
  if (urls === undefined || urls.length < 2) return text
  const problems: string[] = []
  for (const url of urls) {
    url.searchParams.delete('target_session_attrs')
    const sql = postgres(url.toString(), { max: 1, connect_timeout: 3, onnotice: () => {} })
    try {
      const [row] = await sql<{ writable: boolean }[]>`
        select not pg_is_in_recovery() and current_setting('transaction_read_only') = 'off'
          as writable`
      if (row?.writable) return url.toString()
      problems.push(`${url.host} is read-only`)
    } catch (err) {
      problems.push(`${url.host}: ${err instanceof Error ? err.message : String(err)}`)
    } finally {
      await sql.end({ timeout: 1 })
    }
  }
  throw new Error(`no writable server among the hosts (${problems.join('; ')})`)
}
