/** Type guards for provider JSON: a parser never trusts a shape. */

/** A JSON object (not null, not an array). */
export type Json = Record<string, unknown>

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

/** A string with at least one character: an empty delta is no generated output. */
export const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.length > 0

/** Far above any context window, far below 2^53: one hostile answer cannot freeze a loop or poison a counter. */
export const MAX_COUNT = 1e9

/** A token count a provider reported: a non-negative integer ≤ MAX_COUNT. */
export const isCount = (v: unknown): v is number =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= MAX_COUNT

/** A count field, or undefined; a present non-count is noted as a parse error and the stream's own count stands. */
export function readCount(value: unknown, summary: { parseError?: string }, name: string): number | undefined {
  if (isCount(value)) return value
  if (value === undefined || value === null) return undefined
  if (summary.parseError === undefined)
    summary.parseError = `reported ${name} is not a token count (${shortText(value)}): not used`
  return undefined
}

/** A value's JSON text, cut to 40 characters, for a log line. */
function shortText(value: unknown): string {
  let text: string
  try {
    text = typeof value === 'number' ? String(value) : (JSON.stringify(value) ?? typeof value)
  } catch {
    text = typeof value
  }
  return text.length > 40 ? `${text.slice(0, 40)}…` : text
}
