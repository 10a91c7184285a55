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

/** The hosts of a URL, each as a one-host URL without `target_session_attrs`. */
export function hostsOf(url: string): URL[] {
  const urls = hostUrls(url) ?? []
  for (const u of urls) u.searchParams.delete('target_session_attrs')
  return urls
}

/** The URL with its first host only, for the driver, which `hostConnector` opens sockets for. */
export function singleHostUrl(url: string): string {
  const m = pattern.exec(url)
  if (!m) return url
  const [, protocol, userinfo, hosts = '', rest = ''] = m
  return `${protocol}//${userinfo === undefined ? '' : `${userinfo}@`}${hosts.split(',')[0]}${rest}`
}
