import { type Failure, failure } from './errors.ts'
import type { Handler } from './types.ts'

/** One row of the route table. */
export type Route = { readonly method: string; readonly path: string; readonly handler: Handler }

/**
 * Builds the router: an ordered route table and one loop. HEAD is answered by the GET route of a
 * path; an unknown path is 404 and a known path with another method 405 with its `Allow` list.
 */
export function createRouter(
  routes: readonly Route[],
): (method: string, path: string) => Handler | Failure {
  return (method, path) => {
    const allow: string[] = []
    for (const route of routes) {
      if (route.path !== path) continue
      if (route.method === method || (method === 'HEAD' && route.method === 'GET'))
        return route.handler
      allow.push(route.method)
      if (route.method === 'GET') allow.push('HEAD')
    }
    if (allow.length === 0) return failure(40401, `no such path: ${path}`)
    return failure(
      40501,
      `method ${method} is not allowed on ${path}; allowed: ${allow.join(', ')}`,
      allow,
    )
  }
}
