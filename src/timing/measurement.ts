import { MarkKind } from './chunk-log.ts'
import type { ChunkLog } from './chunk-log.ts'
import { countStalls, itlQuantiles, reconcileTokens, summarize, totalTokens } from './request-timing.ts'
import type { Timing } from './request-timing.ts'
import { judgeSlo } from './slo.ts'
import type { RouteSlo, SloVerdict } from './slo.ts'
import type { StreamSummary } from '../parsers/types.ts'
import type { FailureCode } from '../errors.ts'

/**
 * The one home of measuring policy: a finished exchange's facts in, its `Measurement` out.
 * Outcome, status, output tokens and their source, timing, stalls, the request's own ITL
 * quantiles, the SLO verdict and the estimate ratio are decided here and nowhere else; the
 * Prometheus metrics, the OTLP export, the log line and the debug views only map the result.
 * Definitions: ../../docs/metrics.md and the project's CONTRACT.
 */

/** How a request ended (the `outcome` label). */
export const Outcome = { ok: 'ok', error: 'error', cancelled: 'cancelled' } as const
export type Outcome = (typeof Outcome)[keyof typeof Outcome]

/**
 * Where an output token count comes from (the `source` label): `usage`, the provider reported
 * the total; `stream`, counted exactly from per-token events when no total was reported;
 * `estimate`, the tokenizer's count of the streamed text.
 */
export const TokenSource = { usage: 'usage', estimate: 'estimate', stream: 'stream' } as const
export type TokenSource = (typeof TokenSource)[keyof typeof TokenSource]

/** The status recorded for a request the client left before any response head (nginx's convention). */
const CLIENT_CLOSED_STATUS = 499
/** The status recorded for a request that failed before any response head without an answer of the proxy's. */
const NO_RESPONSE_STATUS = 502

/** What the exchange saw, as it was when the response closed. */
export interface ExchangeFacts {
  /** ms, monotonic: request headers received, and the response's close. */
  readonly tReq: number
  readonly tEnd: number
  /** ms: upstream response headers, when the upstream answered. */
  readonly tHeaders: number | undefined
  /** The status the client got (the upstream's, or the proxy's own error answer); 0 when none was written. */
  readonly statusCode: number
  /** Why the proxy or the upstream failed the request, when it did. */
  readonly failure: FailureCode | undefined
  /** The client closed before the last byte was written, with no failure of ours. */
  readonly clientGone: boolean
  /** The content chunks' arrival marks (its token counts are reconciled in place, see below). */
  readonly chunks: ChunkLog
  /** The parser's end-of-stream summary ({} when nothing was parsed). */
  readonly summary: StreamSummary
  /** Why a successful answer on a completion path could not be read at all. */
  readonly unreadable?: string
  readonly slo?: RouteSlo
  /** Seconds: a longer gap between content chunks is a stall. */
  readonly stallSeconds: number
  /**
   * Σ k_j as the parser counted it, before any reconciling with the provider's usage (the
   * estimate ratio's numerator); taken from `chunks` when absent. An exchange measured twice
   * passes the first count, since reconciling rewrites the log.
   */
  readonly estimatedTokens?: number
}

export interface Measurement {
  readonly outcome: Outcome
  /** The status to label: the client's, else 499 (client left first) or 502 (no answer). */
  readonly statusCode: number
  readonly failure: FailureCode | undefined
  /** A provider error event inside the stream (its code or type). */
  readonly providerError: string | undefined
  readonly timing: Timing
  /** Output tokens: the provider's total when reported, else the streamed N. */
  readonly outputTokens: number
  readonly outputSource: TokenSource
  /** Input tokens the provider reported. */
  readonly inputTokens: number | undefined
  /** Seconds from request headers to the upstream's response headers. */
  readonly headersSeconds: number | undefined
  readonly stalls: number
  /** The request's own token-weighted ITL quantiles (seconds). */
  readonly itlP50: number | undefined
  readonly itlP99: number | undefined
  readonly slo: SloVerdict | undefined
  /** Tokenizer estimate ÷ provider usage of the streamed output, once per ok request with both. */
  readonly estimateRatio: number | undefined
  /** Why the stream could not be measured (the parser gave up, or no parser took its type). */
  readonly parseError: string | undefined
  /** The content marks, token counts final (what gap-by-gap views iterate). */
  readonly chunks: ChunkLog
}

/**
 * Decides everything about one finished request. Pure but for one deliberate effect: a
 * tokenizer's per-chunk estimates in `facts.chunks` are scaled to the provider's reported total
 * (so TTFT, ITL and TPOT agree with the bill); the log belongs to the finished exchange and is
 * read by nothing else afterwards.
 */
export function measure(facts: ExchangeFacts): Measurement {
  const { summary, chunks } = facts
  const outcome: Outcome = facts.clientGone
    ? Outcome.cancelled
    : facts.failure !== undefined || facts.statusCode < 200 || facts.statusCode >= 300 || summary.error !== undefined
      ? Outcome.error
      : Outcome.ok

  const usage = summary.usage
  let source: TokenSource = TokenSource.estimate
  let estimateRatio: number | undefined
  if (usage?.output !== undefined) {
    source = TokenSource.usage
    if (!chunks.allExact && outcome !== Outcome.cancelled) {
      // Reasoning the provider counted but did not stream is not in the chunks.
      let streamedReasoning = false
      for (let i = 0; i < chunks.count && !streamedReasoning; i++) streamedReasoning = chunks.kind(i) === MarkKind.reasoning
      const visible = usage.output - (usage.reasoning !== undefined && !streamedReasoning ? usage.reasoning : 0)
      // The tokenizer's estimate, taken before reconciling replaces it with the provider's count.
      if (outcome === Outcome.ok && chunks.count > 0 && visible > 0) estimateRatio = (facts.estimatedTokens ?? totalTokens(chunks)) / visible
      reconcileTokens(chunks, visible)
    }
  } else if (chunks.count > 0 && chunks.allExact) {
    source = TokenSource.stream
  }
  const timing = summarize(facts.tReq, facts.tEnd, chunks)
  const statusCode = facts.statusCode !== 0 ? facts.statusCode : outcome === Outcome.cancelled ? CLIENT_CLOSED_STATUS : NO_RESPONSE_STATUS
  const [itlP50, itlP99] = itlQuantiles(chunks, QUANTILES)
  const slo = facts.slo === undefined ? undefined : judgeSlo(facts.slo, { outcome, statusCode, timing, itlP99 })
  return {
    outcome,
    statusCode,
    failure: facts.failure,
    providerError: summary.error,
    timing,
    outputTokens: usage?.output ?? timing.tokens,
    outputSource: source,
    inputTokens: usage?.input,
    headersSeconds: facts.tHeaders === undefined ? undefined : Math.max(0, facts.tHeaders - facts.tReq) / 1000,
    stalls: timing.chunks >= 2 ? countStalls(chunks, facts.stallSeconds) : 0,
    itlP50,
    itlP99,
    slo,
    estimateRatio: estimateRatio !== undefined && Number.isFinite(estimateRatio) ? estimateRatio : undefined,
    parseError: summary.parseError ?? facts.unreadable,
    chunks,
  }
}

const QUANTILES = [0.5, 0.99] as const

/** The error type a failed or cancelled request is reported with (OpenTelemetry's `error.type`). */
export function errorType(m: Measurement): string | undefined {
  if (m.outcome === Outcome.ok) return undefined
  if (m.outcome === Outcome.cancelled) return 'cancelled'
  if (m.failure !== undefined) return m.failure
  return m.statusCode < 200 || m.statusCode >= 300 ? String(m.statusCode) : 'provider_error'
}
