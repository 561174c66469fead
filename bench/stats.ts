/** Exact percentiles of a sample (sorted copy); NaN for an empty one. */

export function sorted(values: readonly number[]): Float64Array {
  const a = Float64Array.from(values.filter((v) => Number.isFinite(v)))
  a.sort()
  return a
}

/** Nearest-rank percentile of an ascending array. */
export function pct(a: Float64Array, p: number): number {
  if (a.length === 0) return NaN
  const rank = Math.ceil((p / 100) * a.length)
  return a[Math.min(a.length - 1, Math.max(0, rank - 1))]
}

export function summary(values: readonly number[]) {
  const a = sorted(values)
  let total = 0
  for (const v of a) total += v
  return { n: a.length, p50: pct(a, 50), p90: pct(a, 90), p99: pct(a, 99), p999: pct(a, 99.9), max: a.length ? a[a.length - 1] : NaN, mean: a.length ? total / a.length : NaN }
}

export type Summary = ReturnType<typeof summary>

export const round = (v: number, digits = 3): number => (Number.isFinite(v) ? Math.round(v * 10 ** digits) / 10 ** digits : v)
