import { type Failure, failure } from './errors.ts'
import type { Handler } from './types.ts'

/**
 * One row of the route table. `path` is a pattern: literal segments, and `:name` segments that
 * match any one non-empty segment and hand it to the handler (`ctx.params.name`, decoded).
 */
export type Route = { readonly method: string; readonly path: string; readonly handler: Handler }

/** Where a request goes: the handler, or the 404/405 for it. */
export type Routed = {
  readonly target: Handler | Failure
  /** The pattern of the path matched (the metrics' label); undefined when none did (404). */
  readonly pattern: string | undefined
  /** The `:name` segments of the pattern, decoded. */
  readonly params: Readonly<Record<string, string>>
}

const noParams: Readonly<Record<string, string>> = Object.freeze({})

/** A request target's path: its URL without the query. */
export function pathOf(url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

/** The answer for a path no route knows (40401). */
export function noSuchPath(path: string): Failure {
  return failure(40401, `no such path: ${path}`)
}

/**
 * How a route's pattern matches a path, built once: a plain comparison for a pattern without
 * parameters; otherwise segment by segment. Undefined when the path does not match.
 */
function matcher(pattern: string): (path: string) => Readonly<Record<string, string>> | undefined {
  if (!pattern.includes('/:')) return (path) => (path === pattern ? noParams : undefined)
  const segments = pattern.split('/')
  return (path) => {
    const parts = path.split('/')
    if (parts.length !== segments.length) return undefined
    const params: Record<string, string> = {}
    for (let i = 0; i < segments.length; i++) {
      const segment = segments[i] ?? ''
      const part = parts[i] ?? ''
      if (!segment.startsWith(':')) {
        if (part !== segment) return undefined
        continue
      }
      if (part === '') return undefined
      try {
        params[segment.slice(1)] = decodeURIComponent(part)
      } catch {
        return undefined // malformed percent-encoding: no such path
      }
    }
    return params
  }
}

/**
 * Builds the router: an ordered route table and one loop. HEAD is answered by the GET route of a
 * path; an unknown path is 404 and a known path with another method 405 with its `Allow` list.
 */
export function createRouter(routes: readonly Route[]): (method: string, path: string) => Routed {
  const table = routes.map((route) => ({ ...route, match: matcher(route.path) }))
  return (method, path) => {
    const allow: string[] = []
    let pattern: string | undefined
    for (const route of table) {
      const params = route.match(path)
      if (params === undefined) continue
      if (route.method === method || (method === 'HEAD' && route.method === 'GET'))
        return { target: route.handler, pattern: route.path, params }
      pattern ??= route.path
      allow.push(route.method)
      if (route.method === 'GET') allow.push('HEAD')
    }
    if (pattern === undefined) return { target: noSuchPath(path), pattern, params: noParams }
    return {
      target: failure(
        40501,
        `method ${method} is not allowed on ${path}; allowed: ${allow.join(', ')}`,
        allow,
      ),
      pattern,
      params: noParams,
    }
  }
}
