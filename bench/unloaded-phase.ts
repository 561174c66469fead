import type { Job, StreamResult } from './load-client.ts'
import { evenPlan, request, turns, type Target } from './plans.ts'
import { round, summary } from './stats.ts'

/**
 * Unloaded: one request of three content chunks at a time, the paths in turn. Per request, the
 * client's TTFT and the first content chunk's one-way delay; beside them, tokentap's own account of
 * the same span, `llm_proxy_overhead_seconds{phase="first_chunk"}`, read from /metrics before and after.
 */

export interface UnloadedDeps {
  job<T>(job: Job): Promise<T>
  readonly targets: Readonly<Record<string, Target>>
  /** tokentap's /metrics (the overhead histogram), when tokentap is one of the paths. */
  readonly metricsUrl?: string
}

export interface UnloadedResult {
  /** Client-side TTFT and the first chunk's one-way delay per request (ms, NaN for a failed one), per path, in order. */
  readonly ttft: Record<string, number[]>
  readonly firstDelay: Record<string, number[]>
  /** tokentap's overhead histogram over the phase: cumulative buckets by upper bound (s). */
  readonly overhead: Buckets
}

type Buckets = Map<number, number>

export async function unloadedPhase(d: UnloadedDeps, rounds: number): Promise<UnloadedResult> {
  const paths = Object.keys(d.targets)
  const ttft: Record<string, number[]> = Object.fromEntries(paths.map((p) => [p, []]))
  const firstDelay: Record<string, number[]> = Object.fromEntries(paths.map((p) => [p, []]))
  const plan = evenPlan(3, 1)
  const before = d.metricsUrl === undefined ? new Map() : await scrapeOverhead(d.metricsUrl)
  for (const { round: r, path: p } of turns(paths, rounds)) {
    const [res] = await d.job<StreamResult[]>({ kind: 'streams', ...request(d.targets[p], plan), count: 1, concurrency: 1, phaseMs: 0, idPrefix: `ttft-${p}-${r}`, detail: true })
    ttft[p].push(res.ok ? res.ttft : NaN)
    firstDelay[p].push(res.ok && res.delays.length > 0 ? res.delays[0] : NaN)
  }
  const after = d.metricsUrl === undefined ? new Map() : await scrapeOverhead(d.metricsUrl)
  const overhead: Buckets = new Map()
  for (const [le, v] of after) overhead.set(le, v - (before.get(le) ?? 0))
  return { ttft, firstDelay, overhead }
}

/** Each block of `size` requests' p50 (a block is one round of the added-TTFT target). */
export function blockP50(xs: readonly number[], size: number): number[] {
  const out: number[] = []
  for (let i = 0; i + size <= xs.length; i += size) out.push(summary(xs.slice(i, i + size)).p50)
  return out
}

/** tokentap's overhead p50 beside the client's side of the same span. */
export type OverheadFigures = ReturnType<typeof overheadFigures>

/**
 * The client's side: what tokentap adds to the first chunk's one-way delay (p50 through it minus
 * direct), less what one more loopback hop adds (the TCP relay's own addition), which no proxy's
 * account of its own work can see.
 */
export function overheadFigures(u: UnloadedResult) {
  const n = u.overhead.size === 0 ? 0 : Math.max(...u.overhead.values())
  const p50 = n > 0 ? bucketQuantile(u.overhead, 0.5) * 1000 : NaN
  const first = (p: string): number => summary(u.firstDelay[p] ?? []).p50
  const added = round(first('tokentap') - first('direct'))
  const hop = u.firstDelay['tcp-relay'] === undefined ? 0 : round(first('tcp-relay') - first('direct'))
  return {
    metric: 'llm_proxy_overhead_seconds{phase="first_chunk"}',
    requests: n,
    p50_ms: n > 0 ? round(p50) : null,
    client_added_first_chunk_p50_ms: added,
    hop_first_chunk_p50_ms: hop,
    client_added_beyond_hop_p50_ms: round(added - hop),
    difference_ms: n > 0 ? round(p50 - (added - hop)) : null,
  }
}

/** The first_chunk buckets of llm_proxy_overhead_seconds, summed over its series; empty when the metric is absent. */
async function scrapeOverhead(metricsUrl: string): Promise<Buckets> {
  const text = await (await fetch(metricsUrl, { headers: { accept: 'text/plain;version=0.0.4' } })).text()
  const out: Buckets = new Map()
  for (const line of text.split('\n')) {
    if (!line.startsWith('llm_proxy_overhead_seconds_bucket{') || !line.includes('phase="first_chunk"')) continue
    const le = /le="([^"]+)"/.exec(line)
    if (le === null) continue
    const bound = le[1] === '+Inf' ? Infinity : Number(le[1])
    out.set(bound, (out.get(bound) ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1)))
  }
  return out
}

/** The q-quantile of cumulative buckets, interpolated inside its bucket as PromQL's histogram_quantile does; NaN without observations. */
function bucketQuantile(b: Buckets, q: number): number {
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
