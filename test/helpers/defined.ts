/**
 * `value` narrowed to defined: where a test needs a value it just made sure of (a parser the
 * registry selected, a response body), a missing one fails with what was missing rather than a
 * TypeError later (and without a non-null assertion).
 */
export function defined<T>(value: T | null | undefined, what: string): T {
  if (value === undefined || value === null) throw new Error(`expected ${what}, got ${value}`)
  return value
}
