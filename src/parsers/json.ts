/**
 * Small type guards every parser reads provider JSON with: a parser must never trust a shape,
 * so each field is checked before use.
 */

/** A JSON object (not null, not an array). */
export type Json = Record<string, unknown>

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

/** A string with at least one character: an empty delta is no generated output. */
export const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.length > 0

/**
 * The largest token count one request may report. Far above any context window, far below where
 * a float counter stops adding 1s (2^53): one hostile or broken answer cannot freeze a loop sized
 * by it or poison a counter for good.
 */
export const MAX_COUNT = 1e9

/** A token count a provider reported: a non-negative integer ≤ MAX_COUNT. */
export const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= MAX_COUNT

/**
 * A count field of provider JSON: the count, or undefined when absent (undefined, null) or not a
 * count (a string, a fraction, negative, huge, Infinity). A value that is not a count is noted
 * as the summary's parse error (counted in llm_parse_errors_total) and not used: the stream's own
 * count stands in for it.
 */
export function readCount(value: unknown, summary: { parseError?: string }, name: string): number | undefined {
  if (isCount(value)) return value
  if (value === undefined || value === null) return undefined
  if (summary.parseError === undefined) summary.parseError = `reported ${name} is not a token count (${shortText(value)}): not used`
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
