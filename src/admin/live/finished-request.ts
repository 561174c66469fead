import type { Measurement } from '../../timing/measurement.ts'

/**
 * What the live page and `/debug/requests/{id}` learn of a request when it ends: its figures,
 * never its text, headers or credentials. Seconds, as the timing code gives them. Filled from
 * the request's Measurement (`fromMeasurement`, a Recorder listener).
 */

export const LiveOutcome = { ok: 'ok', error: 'error', cancelled: 'cancelled' } as const
export type LiveOutcome = (typeof LiveOutcome)[keyof typeof LiveOutcome]

export interface FinishedRequest {
  /** The client's x-request-id, else the upstream's, else the generated one. */
  readonly id: string
  readonly route: string
  readonly provider: string
  /** The `model` label value (already bounded per route). */
  readonly model: string
  readonly outcome: LiveOutcome
  readonly statusCode: number
  /** t(first content chunk) − t_req. */
  readonly ttft?: number
  /** t(first non-reasoning content chunk) − t_req. */
  readonly ttfot?: number
  /** Response headers − t_req. */
  readonly headers?: number
  readonly e2e: number
  readonly tpot?: number
  /** Per-user N / E2E. */
  readonly tps?: number
  /** The request's own token-weighted ITL quantiles (as its log line). */
  readonly itlP50?: number
  readonly itlP99?: number
  readonly maxGap?: number
  /** Gaps longer than `metrics.stall_seconds`. */
  readonly stalls: number
  /** The provider's count when reported, else N. */
  readonly outputTokens: number
  readonly outputSource: string
  readonly inputTokens?: number
  /** Content chunks. */
  readonly chunks: number
  /** Per content chunk j ≥ 2: g_j in seconds (`gapSeconds[j − 2]`) and k_j (`gapTokens[j − 2]`). */
  readonly gapSeconds: Float64Array
  readonly gapTokens: Uint32Array
  /** Requests in flight when it started, itself included. */
  readonly concurrency: number
  /** t_end, ms on the proxy's monotonic clock (performance.now()). */
  readonly endedAt: number
}

/** Who a finished request was: the part of the exchange's identity the live views keep. */
export interface FinishedWho {
  readonly id: string
  readonly concurrency: number
  /** t_req, ms on the monotonic clock. */
  readonly tReq: number
}

/**
 * A FinishedRequest from a request's Measurement (what the Recorder hands its listeners): the
 * gaps are copied out of its chunk log, whose counts are final.
 */
export function fromMeasurement(who: FinishedWho, labels: { readonly provider: string; readonly model: string; readonly route: string }, m: Measurement): FinishedRequest {
  const log = m.chunks
  const n = Math.max(0, log.count - 1)
  const gapSeconds = new Float64Array(n)
  const gapTokens = new Uint32Array(n)
  for (let i = 1; i <= n; i++) {
    gapSeconds[i - 1] = (log.at(i) - log.at(i - 1)) / 1000
    gapTokens[i - 1] = log.tokens(i)
  }
  const t = m.timing
  const ok = m.outcome === LiveOutcome.ok
  return {
    id: who.id,
    route: labels.route,
    provider: labels.provider,
    model: labels.model,
    outcome: m.outcome,
    statusCode: m.statusCode,
    ttft: t.ttft,
    ttfot: t.ttfot,
    headers: m.headersSeconds,
    e2e: t.e2e,
    // As the TPOT and per-user TPS histograms: only for ok requests.
    tpot: ok ? t.tpot : undefined,
    tps: ok && t.chunks > 0 ? t.tps : undefined,
    itlP50: m.itlP50,
    itlP99: m.itlP99,
    maxGap: t.maxGap,
    stalls: m.stalls,
    outputTokens: m.outputTokens,
    outputSource: m.outputSource,
    inputTokens: m.inputTokens,
    chunks: t.chunks,
    gapSeconds,
    gapTokens,
    concurrency: who.concurrency,
    endedAt: who.tReq + t.e2e * 1000,
  }
}
