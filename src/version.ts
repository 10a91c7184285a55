import { readFileSync } from 'node:fs'

/** The service's version, as `package.json` says (the metrics' build info, the spans' resource). */
export const serviceVersion = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string
  }
).version
