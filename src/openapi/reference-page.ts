import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { noSuchPath, pathOf, type Route } from '../http/router.ts'
import type { Content } from '../http/types.ts'

/**
 * The reference page's Content-Security-Policy. Everything comes from the service itself; no
 * inline script or style. `img-src data:` is for the icons that swagger-ui.css embeds as data
 * URLs; `connect-src 'self'` lets the page fetch the document and send try-it requests to this
 * service and nowhere else.
 */
export const docsContentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ')

type Asset = { readonly name: string; readonly type: string; readonly body: Buffer }

// A source map comment would make a browser's developer tools ask for a file not served here.
function withoutSourceMap(text: string): Buffer {
  return Buffer.from(
    text.replace(/\n?(\/\/# sourceMappingURL=\S+|\/\*# sourceMappingURL=\S+ ?\*\/)\s*$/, '\n'),
  )
}

function readAssets(): Asset[] {
  const swaggerUi = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'))
  const read = (path: string) => withoutSourceMap(readFileSync(path, 'utf8'))
  return [
    {
      name: 'swagger-ui.css',
      type: 'text/css; charset=utf-8',
      body: read(join(swaggerUi, 'swagger-ui.css')),
    },
    {
      name: 'swagger-ui-bundle.js',
      type: 'text/javascript; charset=utf-8',
      body: read(join(swaggerUi, 'swagger-ui-bundle.js')),
    },
    {
      name: 'start-swagger-ui.js',
      type: 'text/javascript; charset=utf-8',
      body: read(fileURLToPath(new URL('start-swagger-ui.js', import.meta.url))),
    },
  ]
}

function page(assets: string): Buffer {
  // Relative addresses: the page is /docs, so these resolve below /docs/assets/ wherever the
  // service is mounted. The empty data: icon keeps the browser from asking for /favicon.ico.
  return Buffer.from(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Plant store API reference</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${assets}/swagger-ui.css">
</head>
<body>
<div id="docs"></div>
<script src="${assets}/swagger-ui-bundle.js"></script>
<script src="${assets}/start-swagger-ui.js"></script>
</body>
</html>
`)
}

type Docs = {
  /** The hash in the assets' paths. */
  readonly version: string
  readonly page: Content
  readonly assets: ReadonlyMap<string, Content>
}

/** The page and its assets: read and hashed once a process, by the first request for them. */
let docs: Docs | undefined

function loadDocs(): Docs {
  if (docs !== undefined) return docs
  const etagOf = (body: Buffer) =>
    `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`
  const assets = readAssets().map((asset) => ({ ...asset, etag: etagOf(asset.body) }))
  // The path's version is a hash of the assets' own hashes: each body is hashed once.
  const version = createHash('sha256')
    .update(assets.map((a) => a.etag).join(''))
    .digest('hex')
    .slice(0, 12)
  const html = page(`docs/assets/${version}`)
  docs = {
    version,
    page: {
      kind: 'content',
      type: 'text/html; charset=utf-8',
      body: html,
      cacheControl: 'no-cache',
      etag: etagOf(html),
      headers: {
        'content-security-policy': docsContentSecurityPolicy,
        'referrer-policy': 'no-referrer',
      },
    },
    assets: new Map(
      assets.map((asset) => [
        asset.name,
        {
          kind: 'content',
          type: asset.type,
          body: asset.body,
          cacheControl: 'public, max-age=31536000, immutable',
          etag: asset.etag,
        },
      ]),
    ),
  }
  return docs
}

/**
 * The routes of the API reference page: `GET /docs`, rendered by Swagger UI from
 * `/openapi.json`, and its assets. The assets' paths carry a hash of their contents, so they are
 * cached for a year; the page itself is revalidated by its ETag. Nothing is read until the page
 * or an asset is first asked for (Swagger UI's bundle is 1.7 MB: reading and hashing it cost each
 * start about 40 ms of CPU, and it stayed in memory where no one asked for the page); an asset's
 * path with another version is 404, as any unknown path.
 */
export function createDocsRoutes(): Route[] {
  return [
    { method: 'GET', path: '/docs', handler: () => loadDocs().page },
    {
      method: 'GET',
      path: '/docs/assets/:version/:name',
      handler: (req, { params }) => {
        const { version, assets } = loadDocs()
        const asset = params.version === version ? assets.get(params.name ?? '') : undefined
        return asset ?? noSuchPath(pathOf(req.url ?? '/'))
      },
    },
  ]
}
