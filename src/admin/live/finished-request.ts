import type { ChunkLog } from '../../timing/chunk-log.ts'
import type { Timing } from '../../timing/request-timing.ts'
import { countStalls, itlQuantiles } from '../../timing/request-timing.ts'

/**
 * What the live page and `/debug/requests/{id}` learn of a request when it ends: its figures,
 * never its text, headers or credentials. Seconds, as the timing code gives them. Filled from
 * the request's Measurement (for now from `Exchange#record`, see `fromRecord`).
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

/** What `Exchange#record` has at hand, for `fromRecord`. */
export interface RecordFacts {
  readonly id: string
  readonly labels: { readonly provider: string; readonly model: string; readonly route: string }
  readonly outcome: LiveOutcome
  readonly statusCode: number
  readonly timing: Timing
  readonly chunks: ChunkLog
  readonly headersSeconds?: number
  readonly outputTokens: number
  readonly outputSource: string
  readonly inputTokens?: number
  readonly concurrency: number
  readonly tEnd: number
}

/**
 * Builds a FinishedRequest from `Exchange#record`'s values (the bridge until the Measurement
 * carries all of it): the gaps are copied out of the chunk log, which is reused no further.
 */
export function fromRecord(f: RecordFacts, stallSeconds: number): FinishedRequest {
  const log = f.chunks
  const n = Math.max(0, log.count - 1)
  const gapSeconds = new Float64Array(n)
  const gapTokens = new Uint32Array(n)
  for (let i = 1; i <= n; i++) {
    gapSeconds[i - 1] = (log.at(i) - log.at(i - 1)) / 1000
    gapTokens[i - 1] = log.tokens(i)
  }
  const [itlP50, itlP99] = itlQuantiles(log, [0.5, 0.99])
  const t = f.timing
  return {
    id: f.id,
    route: f.labels.route,
    provider: f.labels.provider,
    model: f.labels.model,
    outcome: f.outcome,
    statusCode: f.statusCode,
    ttft: t.ttft,
    ttfot: t.ttfot,
    headers: f.headersSeconds,
    e2e: t.e2e,
    tpot: f.outcome === LiveOutcome.ok ? t.tpot : undefined,
    tps: f.outcome === LiveOutcome.ok && t.chunks > 0 ? t.tps : undefined,
    itlP50,
    itlP99,
    maxGap: t.maxGap,
    stalls: countStalls(log, stallSeconds),
    outputTokens: f.outputTokens,
    outputSource: f.outputSource,
    inputTokens: f.inputTokens,
    chunks: t.chunks,
    gapSeconds,
    gapTokens,
    concurrency: f.concurrency,
    endedAt: f.tEnd,
  }
}
