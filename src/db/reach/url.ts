// postgres[ql]://[user[:password]@]host[:port][,host[:port]...][/database][?parameters], as
// libpq writes a list of hosts. WHATWG's URL parser refuses the list, so it is split here.
const pattern = /^(postgres(?:ql)?:)\/\/(?:([^@/?#]*)@)?([^/?#]*)(.*)$/s

/** The URL's parts around its list of hosts, and the URL rebuilt with one `host` of its own. */
function splitHosts(text: string) {
  const m = pattern.exec(text)
  if (!m) return undefined
  const [, protocol, userinfo, hosts = '', rest = ''] = m
  return {
    hosts: hosts.split(','),
    withHost: (host: string) =>
      `${protocol}//${userinfo === undefined ? '' : `${userinfo}@`}${host}${rest}`,
  }
}

/**
 * One URL per host of a PostgreSQL URL, in order, each with the user, password, database and
 * parameters of the whole; `undefined` when the text is no such URL.
 */
export function hostUrls(text: string): URL[] | undefined {
  const split = splitHosts(text)
  if (!split) return undefined
  try {
    return split.hosts.map((host) => new URL(split.withHost(host)))
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

/** The hosts of a URL, each as a one-host URL without `target_session_attrs`. */
export function hostsOf(url: string): URL[] {
  const urls = hostUrls(url) ?? []
  for (const u of urls) u.searchParams.delete('target_session_attrs')
  return urls
}

/** The URL with its first host only, for the driver, which `hostConnector` opens sockets for. */
export function singleHostUrl(url: string): string {
  const split = splitHosts(url)
  return split ? split.withHost(split.hosts[0] ?? '') : url
}

/**
 * A database URL read once, for what reaches it: each host as a one-host URL (without
 * `target_session_attrs`, which is about the list), its parameters, and whether it asks for a
 * server that takes writes (`target_session_attrs` `read-write` or `primary`).
 */
export type DatabaseUrl = {
  readonly text: string
  readonly hosts: readonly URL[]
  readonly query: URLSearchParams
  readonly wantsWritable: boolean
}

/** The text before the parameters, and the parameters. */
function splitQuery(text: string): { base: string; query: URLSearchParams } {
  const q = text.indexOf('?')
  return {
    base: q === -1 ? text : text.slice(0, q),
    query: new URLSearchParams(q === -1 ? '' : text.slice(q + 1)),
  }
}

export function readDatabaseUrl(text: string): DatabaseUrl {
  const { query } = splitQuery(text)
  const attrs = query.get('target_session_attrs')
  return {
    text,
    hosts: hostsOf(text),
    query,
    wantsWritable: attrs === 'read-write' || attrs === 'primary',
  }
}

/** `text` with its parameters edited by `edit`; the rest as written. */
export function withQuery(text: string, edit: (query: URLSearchParams) => void): string {
  const { base, query } = splitQuery(text)
  edit(query)
  const rest = query.toString()
  return rest === '' ? base : `${base}?${rest}`
}

// The parameters the connector acts on (hosts.ts, tls.ts) and the driver must not see: it would
// send the ones it does not know to the server as settings, which refuses them.
const tlsParameters = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'sslnegotiation', 'ssl']

/** The URL without the TLS parameters, which the connector acts on (tls.ts, `tlsSettingsOf`). */
export function withoutTlsParameters(url: string): string {
  return withQuery(url, (query) => {
    for (const name of tlsParameters) query.delete(name)
  })
}

/**
 * The URL the driver is given: its first host only (the connector, hosts.ts, walks the list in
 * each attempt), without the TLS parameters (the connector hands it a secured socket), and with
 * one check of writability per connection: none when the connector makes it
 * (`connectorChecksWritable`), else the driver's, `read-write` asked as `primary`. (postgres.js
 * 3.4 decides read-write by default_transaction_read_only alone, which a hot standby of
 * PostgreSQL 14+ reports as off: it would write to a standby and get 25006 until it reconnected;
 * `primary`, not in recovery, is what read-write means for a primary and its standbys.)
 */
export function driverUrl(url: DatabaseUrl, connectorChecksWritable: boolean): string {
  return withQuery(withoutTlsParameters(singleHostUrl(url.text)), (query) => {
    if (connectorChecksWritable) query.delete('target_session_attrs')
    else if (query.get('target_session_attrs') === 'read-write')
      query.set('target_session_attrs', 'primary')
  })
}
