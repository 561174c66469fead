/**
 * Small type guards every parser reads provider JSON with: a parser must never trust a shape,
 * so each field is checked before use.
 */

/** A JSON object (not null, not an array). */
export type Json = Record<string, unknown>

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

/** A string with at least one character: an empty delta is no generated output. */
export const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.length > 0

/** A token count a provider reported: a finite number ≥ 0. */
export const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0
