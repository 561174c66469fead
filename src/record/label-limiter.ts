/**
 * Bounds a user-controlled label (the model name) per route: the first `max` distinct values
 * are kept, later ones become `other`, so a flood of random names cannot grow the scrape.
 */
export const OTHER = 'other'
export const UNKNOWN = 'unknown'

/** Longest label value kept; longer model names are cut (they are still one value each). */
export const MAX_VALUE_LENGTH = 128

export class LabelLimiter {
  readonly #max: number
  readonly #seen = new Map<string, Set<string>>()

  constructor(maxPerScope: number) {
    this.#max = maxPerScope
  }

  /** The label value of `raw` in `scope`, admitting it while the scope has room. */
  value(scope: string, raw: string | undefined): string {
    if (raw === undefined || raw.length === 0) return UNKNOWN
    const value = raw.length > MAX_VALUE_LENGTH ? raw.slice(0, MAX_VALUE_LENGTH) : raw
    let set = this.#seen.get(scope)
    if (set === undefined) {
      set = new Set()
      this.#seen.set(scope, set)
    }
    if (set.has(value)) return value
    if (set.size >= this.#max) return OTHER
    set.add(value)
    return value
  }
}
