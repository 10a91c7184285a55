// Module customization hooks (node:module register) that tell the registering thread of every
// module URL resolved, over the port it passed in `data`: a test can then see what was loaded.
let port

export function initialize(data) {
  port = data.port
}

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context)
  port?.postMessage(resolved.url)
  return resolved
}
