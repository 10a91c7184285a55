/**
 * JSON Schema for what Valibot cannot express itself, keyed by schema or action object; read
 * when the OpenAPI document is built.
 */
export const jsonSchemaHints = new WeakMap<object, Record<string, unknown>>()

/** Attaches a JSON Schema hint to a Valibot schema or action and returns it unchanged. */
export function hinted<T extends object>(item: T, hint: Record<string, unknown>): T {
  jsonSchemaHints.set(item, hint)
  return item
}
