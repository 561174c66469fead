/**
 * Exponential bucket mapping (https://prometheus.io/docs/specs/native_histograms/#schema): at schema s the base is
 * 2^(2^−s) and bucket i holds (base^(i−1), base^i]; schema 3 keeps any quantile within about 4.4 %, 6 within 0.55 %.
 */

/** Schemas Prometheus accepts (OpenTelemetry's scale has a wider range; tokentap stays in this one). */
export const MIN_SCHEMA = -4
export const MAX_SCHEMA = 8

/** The exponential bucket of `value` (> 0) at `schema`: the i with base^(i−1) < value ≤ base^i. */
export function bucketIndex(value: number, schema: number): number {
  // log2 is exact on powers of two, so the edges Prometheus and OTel agree on exactly stay exact.
  const v = Math.min(value, Number.MAX_VALUE)
  return Math.ceil(Math.log2(v) * 2 ** schema)
}

/** The upper edge base^i of exponential bucket `index` at `schema`. */
export function bucketUpper(index: number, schema: number): number {
  return 2 ** (index * 2 ** -schema)
}

/** The value a bucket stands for: 2·base^i / (base + 1), within (base − 1)/(base + 1) of every value in it. */
export function bucketMidpoint(index: number, schema: number): number {
  const base = 2 ** (2 ** -schema)
  return (2 * bucketUpper(index, schema)) / (base + 1)
}

/** The index of bucket `index` once the resolution is lowered by `by` steps (each step merges a pair). */
export const coarser = (index: number, by: number): number => -(-index >> by)
