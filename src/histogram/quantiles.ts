import type { HistogramCore } from './histogram-core.ts'

const EMPTY = new Float64Array(0)

/**
 * Nearest-rank quantiles from a core's exponential buckets for ascending `qs`, into `out` (NaN when empty); those
 * above the median walk from the top, so a p99 passes ~1 % of the counts. Float sums get a millionth of a count's slack.
 */
export function quantiles(core: HistogramCore, qs: readonly number[], out: number[]): void {
  const n = qs.length
  const total = core.count
  if (!(total > 0) || core.schema === undefined) {
    for (let i = 0; i < n; i++) out[i] = Number.NaN
    return
  }
  const counts = core.buckets.counts ?? EMPTY
  const lo = core.buckets.lo
  let high = 0
  while (high < n && qs[high] <= 0.5) high++
  let q = 0
  if (q < high) {
    let rank = Math.max(1e-9, qs[0] * total)
    let seen = core.zeroCount
    while (q < high && seen >= rank - 1e-6) {
      out[q++] = 0
      if (q < high) rank = Math.max(1e-9, qs[q] * total)
    }
    let last = lo
    for (let j = 0; j < counts.length && q < high; j++) {
      if (counts[j] === 0) continue
      last = lo + j
      seen += counts[j]
      while (q < high && seen >= rank - 1e-6) {
        out[q++] = core.representative(lo + j)
        if (q < high) rank = Math.max(1e-9, qs[q] * total)
      }
    }
    for (; q < high; q++) out[q] = core.representative(last)
  }
  q = n - 1
  if (q < high) return
  let rank = Math.max(1e-9, qs[q] * total)
  let seen = total
  for (let j = counts.length - 1; j >= 0 && q >= high; j--) {
    if (counts[j] === 0) continue
    const below = seen - counts[j]
    while (q >= high && below < rank - 1e-6) {
      out[q--] = core.representative(lo + j)
      if (q >= high) rank = Math.max(1e-9, qs[q] * total)
    }
    seen = below
  }
  for (; q >= high; q--) out[q] = 0
}
