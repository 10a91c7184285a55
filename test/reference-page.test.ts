import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { docsContentSecurityPolicy } from '../src/openapi/reference-page.ts'
import { startTestServer } from './helpers/server.ts'

const s = await startTestServer({ after })
const pageResponse = await fetch(`${s.base}/docs`)
const html = await pageResponse.text()
const assetPaths = [...html.matchAll(/(?:src|href)="([^"]+)"/g)]
  .map((m) => m[1] ?? '')
  .filter((ref) => !ref.startsWith('data:'))

describe('the API reference page at GET /docs', () => {
  test('is an HTML page served without a token, under a strict Content-Security-Policy', () => {
    assert.equal(pageResponse.status, 200)
    assert.equal(pageResponse.headers.get('content-type'), 'text/html; charset=utf-8')
    assert.equal(pageResponse.headers.get('content-security-policy'), docsContentSecurityPolicy)
    const policy = docsContentSecurityPolicy
    assert.match(policy, /default-src 'none'/)
    assert.match(policy, /script-src 'self'(;|$)/, 'no inline or outside scripts')
    assert.match(policy, /style-src 'self'(;|$)/, 'no inline or outside styles')
    assert.match(policy, /connect-src 'self'(;|$)/, 'requests only to this service')
    assert.equal(pageResponse.headers.get('x-content-type-options'), 'nosniff')
    assert.ok(pageResponse.headers.get('x-request-id'))
    assert.doesNotMatch(html, /<script>|<style>|\sstyle=|\son\w+=/i, 'no inline script or style')
  })

  test('loads only scripts and styles of its own, at relative, versioned paths', () => {
    assert.equal(assetPaths.length, 3)
    for (const path of assetPaths) assert.match(path, /^docs\/assets\/[0-9a-f]{12}\/[\w.-]+$/)
  })

  test('its assets are cacheable for a year and revalidate by ETag; the page revalidates every time', async () => {
    for (const path of assetPaths) {
      const res = await fetch(`${s.base}/${path}`)
      assert.equal(res.status, 200, path)
      assert.match(res.headers.get('content-type') ?? '', /^text\/(css|javascript); charset=utf-8$/)
      assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable')
      assert.ok((await res.arrayBuffer()).byteLength > 0)
      const etag = res.headers.get('etag') ?? ''
      assert.match(etag, /^"[\w-]+"$/)
      const again = await fetch(`${s.base}/${path}`, { headers: { 'if-none-match': etag } })
      assert.equal(again.status, 304)
      assert.equal((await again.arrayBuffer()).byteLength, 0)
    }
    assert.equal(pageResponse.headers.get('cache-control'), 'no-cache')
    const etag = pageResponse.headers.get('etag') ?? ''
    const revalidated = await fetch(`${s.base}/docs`, { headers: { 'if-none-match': etag } })
    assert.equal(revalidated.status, 304)
  })

  test("If-None-Match compares weakly: a proxy's W/ form of the tag, or the tag in a list, gets 304; another tag 200", async () => {
    const etag = pageResponse.headers.get('etag') ?? ''
    const status = async (field: string) => {
      const res = await fetch(`${s.base}/docs`, { headers: { 'if-none-match': field } })
      await res.arrayBuffer()
      return res.status
    }
    assert.equal(await status(`W/${etag}`), 304)
    assert.equal(await status(`"other", W/${etag}`), 304)
    assert.equal(await status('*'), 304)
    assert.equal(await status('"other", W/"other"'), 200)
    assert.equal(await status(etag.slice(1, -1)), 200)
  })

  test('the document and the API stay no-store', async () => {
    for (const path of ['/openapi.json', '/healthz', '/plants']) {
      const res = await fetch(`${s.base}${path}`, { method: path === '/plants' ? 'POST' : 'GET' })
      await res.arrayBuffer()
      assert.equal(res.headers.get('cache-control'), 'no-store', path)
    }
  })

  test('HEAD answers like GET without a body; other methods are 405; /docs/ and unknown assets are 40401', async () => {
    const head = await fetch(`${s.base}/docs`, { method: 'HEAD' })
    assert.equal(head.status, 200)
    assert.equal(head.headers.get('content-length'), String(Buffer.byteLength(html)))
    assert.equal((await head.arrayBuffer()).byteLength, 0)
    const asset = await fetch(`${s.base}/${assetPaths[0]}`, { method: 'HEAD' })
    assert.equal(asset.status, 200)
    const post = await fetch(`${s.base}/docs`, { method: 'POST' })
    assert.equal(post.status, 405)
    assert.equal(post.headers.get('allow'), 'GET, HEAD')
    assert.equal(((await post.json()) as { error: number }).error, 40501)
    // Another version of an asset, and names the page does not use (a source map a browser asks for).
    const version = (assetPaths[0] ?? '').split('/')[2]
    for (const path of [
      '/docs/',
      '/docs/assets/0123456789ab/swagger-ui.css',
      `/docs/assets/${version}/index.html`,
      `/docs/assets/${version}/swagger-ui.css.map`,
      '/docs/index.html',
    ]) {
      const res = await fetch(`${s.base}${path}`)
      assert.equal(res.status, 404, path)
      const body = (await res.json()) as { error: number; message: string }
      assert.equal(body.error, 40401, path)
      assert.equal(body.message, `no such path: ${path}`)
    }
  })
})
