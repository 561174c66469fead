/**
 * The bench side of `llm_proxy_overhead_seconds` (histogram, label `phase` = `request`,
 * `first_chunk`, `chunk`): tokentap's own account of what it adds, read from /metrics and set
 * beside what the client measured. Buckets are summed over every series of a phase and two
 * scrapes subtracted, so only the requests between them count.
 */

const OVERHEAD_METRIC = 'llm_proxy_overhead_seconds'

/** Cumulative bucket counts by upper bound (seconds), summed over the phase's series; empty when the metric is absent. */
export type Buckets = Map<number, number>

export async function scrapeOverhead(metricsUrl: string, phase: string): Promise<Buckets> {
  const text = await (await fetch(metricsUrl, { headers: { accept: 'text/plain;version=0.0.4' } })).text()
  const out: Buckets = new Map()
  const prefix = `${OVERHEAD_METRIC}_bucket{`
  for (const line of text.split('\n')) {
    if (!line.startsWith(prefix) || !line.includes(`phase="${phase}"`)) continue
    const le = /le="([^"]+)"/.exec(line)
    if (le === null) continue
    const bound = le[1] === '+Inf' ? Infinity : Number(le[1])
    const value = Number(line.slice(line.lastIndexOf(' ') + 1))
    out.set(bound, (out.get(bound) ?? 0) + value)
  }
  return out
}

/** after − before, bucket by bucket. */
export function bucketDiff(after: Buckets, before: Buckets): Buckets {
  const out: Buckets = new Map()
  for (const [le, v] of after) out.set(le, v - (before.get(le) ?? 0))
  return out
}

/**
 * The q-quantile of cumulative buckets, interpolated linearly inside the bucket that holds it
 * (as PromQL's histogram_quantile does); NaN without observations.
 */
export function bucketQuantile(b: Buckets, q: number): number {
  const buckets = [...b].sort(([x], [y]) => x - y)
  const total = buckets.length === 0 ? 0 : buckets[buckets.length - 1][1]
  if (!(total > 0)) return NaN
  const rank = q * total
  let prevBound = 0
  let prevCount = 0
  for (const [le, c] of buckets) {
    if (c >= rank) {
      // The +Inf bucket has no upper bound: answer the highest finite one.
      if (le === Infinity) return prevBound
      return prevBound + ((le - prevBound) * (rank - prevCount)) / Math.max(c - prevCount, 1e-12)
    }
    prevBound = le
    prevCount = c
  }
  return prevBound
}

export const bucketCount = (b: Buckets): number => (b.size === 0 ? 0 : Math.max(...b.values()))
