import type { GapRuns, Observations } from '../../record/observations.ts'
import type { ReportedTimes } from '../../parsers/reported-times.ts'
import type { ErrorType } from '../../record/error-type.ts'
import type { Outcome } from '../../timing/measurement.ts'

/**
 * What the live views learn of a finished request: figures, never text, headers or credentials;
 * a plain map of its Observations, TPOT and TPS gated as the histograms gate them.
 */

export interface FinishedRequest {
  /** The client's x-request-id, else the upstream's, else the generated one. */
  readonly id: string
  readonly route: string
  readonly provider: string
  /** The `model` label value (already bounded per route). */
  readonly model: string
  readonly outcome: Outcome
  readonly statusCode: number
  /** Who is to blame (the `error_type` label; `none` for ok). */
  readonly errorType: ErrorType
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
  readonly chunks: number
  /** Runs of equal gaps between content chunks j ≥ 2 (seconds, tokens, times). */
  readonly gaps: GapRuns
  /** Index in LENGTH_BANDS of the output count. */
  readonly lengthBand: number
  /** Index in INPUT_LENGTH_BANDS of the reported input count (the last: unknown). */
  readonly inputLengthBand: number
  /** Requests in flight when it started, itself included. */
  readonly concurrency: number
  /** t_end, ms on the proxy's monotonic clock (the injected `now`). */
  readonly endedAt: number
  /** The route's latency SLO verdict (routes with `slo:`; undefined when not judged). */
  readonly slo?: 'met' | 'missed'
  /** The upstream's own timings by phase (seconds), as it reported them. */
  readonly upstreamReported?: ReportedTimes
  /** TTFT − the upstream's reported queue + load + prompt. */
  readonly outsideUpstream?: number
  /** Seconds a streamed response waited for the client's socket. */
  readonly clientWriteWait?: number
  /** That wait was over 100 ms; undefined when the response was not a stream. */
  readonly slowClient?: boolean
  /** The tenant label value, with `metrics.tenant` on. */
  readonly tenant?: string
  /** With `pricing:` set and some tokens priced: the request's cost, its currency, and whether an estimated count went into it. */
  readonly cost?: number
  readonly currency?: string
  readonly costEstimated?: boolean
}

/** A FinishedRequest from a request's Observations (what the Recorder hands its listeners). */
export function fromObservations(o: Observations): FinishedRequest {
  const m = o.measured
  return {
    id: o.who.id,
    route: o.labels.route,
    provider: o.labels.provider,
    model: o.labels.model,
    outcome: o.outcome,
    statusCode: o.statusCode,
    errorType: o.errorClass,
    ttft: o.ttft,
    ttfot: o.ttfot,
    headers: o.headers,
    e2e: o.e2e,
    tpot: o.tpot,
    tps: o.tps,
    itlP50: m.itlP50,
    itlP99: m.itlP99,
    maxGap: o.maxGap,
    stalls: o.stalls,
    outputTokens: m.outputTokens,
    outputSource: o.outputSource,
    inputTokens: o.inputTokens,
    chunks: m.chunks,
    gaps: o.gaps,
    lengthBand: o.lengthBand,
    inputLengthBand: o.inputLengthBand,
    concurrency: o.concurrency,
    endedAt: o.endedAt,
    slo: o.slo,
    upstreamReported: o.upstreamReported,
    outsideUpstream: o.outsideUpstream,
    clientWriteWait: o.clientWriteWait,
    slowClient: o.slowClient,
    tenant: o.labels.tenant,
    ...(o.cost?.kinds.some((k) => k.tokens > k.unpriced) === true
      ? { cost: o.cost.total, currency: o.cost.currency, costEstimated: o.cost.estimated }
      : {}),
  }
}
