import { mkdir, writeFile } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import process from 'node:process'
import { buildOpenApiDocument } from '../openapi/document.ts'

/** `npm run openapi [-- FILE]`: writes the OpenAPI document (default `dist/openapi.json`). */
export async function openapiCommand(file = 'dist/openapi.json'): Promise<number> {
  await mkdir(dirname(resolve(file)), { recursive: true })
  await writeFile(file, `${JSON.stringify(buildOpenApiDocument(), null, 2)}\n`)
  process.stderr.write(`wrote the OpenAPI document to ${file}\n`)
  return 0
}
