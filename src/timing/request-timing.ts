import { MarkKind } from './chunk-log.ts'
import type { ChunkLog } from './chunk-log.ts'

/**
 * Pure timing core: arrival marks (ms, monotonic) in, the request's figures (seconds) out.
 * Definitions: ../../docs/metrics.md and the project's CONTRACT.
 */

export interface Timing {
  /** E2E = t_end − t_req. */
  readonly e2e: number
  /** TTFT = t(first content chunk) − t_req; undefined when no content arrived. */
  readonly ttft: number | undefined
  /** Time to the first non-reasoning content chunk; undefined when there was none. */
  readonly ttfot: number | undefined
  readonly chunks: number
  /** N = Σ k_j, the streamed output tokens. */
  readonly tokens: number
  /** k_1, tokens in the first content chunk. */
  readonly firstTokens: number
  /** t_last − t_first. */
  readonly decode: number
  /** TPOT = (t_last − t_first) / (N − k_1), when N − k_1 ≥ 1. */
  readonly tpot: number | undefined
  /** Per-user TPS = N / E2E, when N ≥ 1 and E2E > 0. */
  readonly tps: number | undefined
  /** Longest gap between consecutive content chunks; undefined with fewer than 2 chunks. */
  readonly maxGap: number | undefined
}

const S = 1 / 1000

export function summarize(tReq: number, tEnd: number, log: ChunkLog): Timing {
  const e2e = Math.max(0, tEnd - tReq) * S
  const n = log.count
  if (n === 0) {
    return {
      e2e,
      ttft: undefined,
      ttfot: undefined,
      chunks: 0,
      tokens: 0,
      firstTokens: 0,
      decode: 0,
      tpot: undefined,
      tps: undefined,
      maxGap: undefined,
    }
  }
  let tokens = 0
  let maxGap = 0
  let ttfot: number | undefined
  let prev = log.at(0)
  for (let i = 0; i < n; i++) {
    const at = log.at(i)
    tokens += log.tokens(i)
    if (i > 0 && at - prev > maxGap) maxGap = at - prev
    if (ttfot === undefined && log.kind(i) !== MarkKind.reasoning) ttfot = (at - tReq) * S
    prev = at
  }
  const first = log.at(0)
  const firstTokens = log.tokens(0)
  const decode = (log.at(n - 1) - first) * S
  const rest = tokens - firstTokens
  return {
    e2e,
    ttft: (first - tReq) * S,
    ttfot,
    chunks: n,
    tokens,
    firstTokens,
    decode,
    tpot: rest >= 1 ? decode / rest : undefined,
    tps: tokens >= 1 && e2e > 0 ? tokens / e2e : undefined,
    maxGap: n >= 2 ? maxGap * S : undefined,
  }
}

/** Reused by the synchronous selection, so no allocation per request; a larger request gets its own array. */
let scratch = new Float64Array(1024)
const SCRATCH_MAX = 1 << 16

/** Quantiles of one request's token-weighted ITL (each gap g_j / k_j weighted by k_j); undefined under two chunks. */
export function itlQuantiles(log: ChunkLog, qs: readonly number[]): (number | undefined)[] {
  const n = log.count
  if (n < 2) return qs.map(() => undefined)
  let total = 0
  for (let i = 1; i < n; i++) total += log.tokens(i)
  if (total === 0) return qs.map(() => undefined)
  // Each g_j / k_j repeated k_j times in a typed array, capped against a chunk claiming millions.
  const size = Math.min(total, 1 << 22)
  if (size > SCRATCH_MAX) return selectQuantiles(log, qs, new Float64Array(size), size)
  if (size > scratch.length) scratch = new Float64Array(Math.max(size, scratch.length * 2))
  return selectQuantiles(log, qs, scratch, size)
}

/** itlQuantiles over `values` (at least `size` long; what is past `size` is never read). */
function selectQuantiles(log: ChunkLog, qs: readonly number[], values: Float64Array, size: number): number[] {
  const n = log.count
  let filled = 0
  for (let i = 1; i < n && filled < size; i++) {
    const k = log.tokens(i)
    if (k === 0) continue
    const v = ((log.at(i) - log.at(i - 1)) * S) / k
    if (k === 1) {
      values[filled++] = v
      continue
    }
    const end = Math.min(size, filled + k)
    values.fill(v, filled, end)
    filled = end
  }
  // Nearest rank (the smallest value whose cumulative weight reaches q × total), by linear selection, not a sort.
  const q = qs.length
  const ranks: number[] = new Array(q)
  const order: number[] = new Array(q)
  for (let i = 0; i < q; i++) {
    ranks[i] = Math.min(size - 1, Math.max(0, Math.ceil(qs[i] * size) - 1))
    let j = i
    while (j > 0 && ranks[order[j - 1]] > ranks[i]) {
      order[j] = order[j - 1]
      j--
    }
    order[j] = i
  }
  let lo = 0
  for (let j = 0; j < q; j++) {
    const r = ranks[order[j]]
    select(values, r, lo, size - 1)
    lo = r
  }
  for (let i = 0; i < q; i++) ranks[i] = values[ranks[i]]
  return ranks
}

/** Hoare's selection of `a[k]` in `a[lo..hi]`; equal values split evenly so identical gaps (a burst) stay linear. */
function select(a: Float64Array, k: number, lo: number, hi: number): void {
  while (hi > lo) {
    const mid = (lo + hi) >>> 1
    const x = a[lo]
    const y = a[mid]
    const z = a[hi]
    const pivot = x < y ? (y < z ? y : Math.max(x, z)) : x < z ? x : Math.max(y, z)
    let i = lo
    let j = hi
    while (i <= j) {
      while (a[i] < pivot) i++
      while (a[j] > pivot) j--
      if (i <= j) {
        const t = a[i]
        a[i] = a[j]
        a[j] = t
        i++
        j--
      }
    }
    if (k <= j) hi = j
    else if (k >= i) lo = i
    else return
  }
}

/**
 * Scales estimated counts so Σ k_j = the reported visible output (largest remainder, each chunk ≥ 1), so
 * every observation uses the provider's count; unchanged when the target is unusable or already met.
 */
export function reconcileTokens(log: ChunkLog, target: number): boolean {
  const n = log.count
  if (n === 0 || !Number.isSafeInteger(target) || target < n) return false
  let estimated = 0
  for (let i = 0; i < n; i++) estimated += log.tokens(i)
  if (estimated === target || estimated === 0) return false
  // Each chunk gets 1; target − n is shared in proportion to k_j − 1 (or to 1 when every estimate is 1).
  const spare = target - n
  let weightTotal = estimated - n
  const useUniform = weightTotal === 0
  if (useUniform) weightTotal = n
  const frac = new Float64Array(n)
  let given = 0
  for (let i = 0; i < n; i++) {
    const w = useUniform ? 1 : log.tokens(i) - 1
    const share = (spare * w) / weightTotal
    const whole = Math.floor(share)
    frac[i] = share - whole
    log.setTokens(i, 1 + whole)
    given += whole
  }
  // Float rounding of huge shares can leave any residue: one more each by fraction, the rest to the
  // largest, so the loop runs at most n times whatever the target.
  let left = spare - given
  if (left > 0) {
    const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => frac[b] - frac[a] || a - b)
    for (let j = 0; j < n && left > 0; j++, left--) log.setTokens(order[j], log.tokens(order[j]) + 1)
    if (left > 0) log.setTokens(order[0], log.tokens(order[0]) + left)
  }
  return true
}

/** Gaps between consecutive content chunks strictly longer than `thresholdSeconds`. */
export function countStalls(log: ChunkLog, thresholdSeconds: number): number {
  const limitMs = thresholdSeconds * 1000
  let stalls = 0
  for (let i = 1; i < log.count; i++) if (log.at(i) - log.at(i - 1) > limitMs) stalls++
  return stalls
}

/** Σ k_j as the log holds it now (before or after reconciling with usage). */
export function totalTokens(log: ChunkLog): number {
  let n = 0
  for (let i = 0; i < log.count; i++) n += log.tokens(i)
  return n
}
