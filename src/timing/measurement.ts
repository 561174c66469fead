import { MarkKind } from './chunk-log.ts'
import type { ChunkLog } from './chunk-log.ts'
import { countStalls, itlQuantiles, reconcileTokens, summarize, totalTokens } from './request-timing.ts'
import type { Timing } from './request-timing.ts'
import { judgeSlo } from './slo.ts'
import type { RouteSlo, SloVerdict } from './slo.ts'
import type { StreamSummary, Usage } from '../parsers/types.ts'
import { isCount } from '../parsers/json.ts'
import { reportedBeforeFirstToken } from '../parsers/reported-times.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import type { FailureCode } from '../errors.ts'
import { isSuccess } from '../http-status.ts'

/**
 * A finished exchange's facts in, its `Measurement` out: everything about one request is decided here
 * and nowhere else. Definitions: ../../docs/metrics.md and the project's CONTRACT.
 */

/** How a request ended (the `outcome` label). */
export const Outcome = { ok: 'ok', error: 'error', cancelled: 'cancelled' } as const
export type Outcome = (typeof Outcome)[keyof typeof Outcome]

/** The `source` label: the provider's reported total, exact per-token events, or the tokenizer's estimate. */
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
  /** The underlying code under the failure (undici's, the socket's), when known. */
  readonly failureDetail?: string
  /** The client closed before the last byte was written, with no failure of ours. */
  readonly clientGone: boolean
  /** The content chunks' arrival marks, as the parser counted their tokens (never changed here). */
  readonly chunks: ChunkLog
  /** The parser's end-of-stream summary ({} when nothing was parsed). */
  readonly summary: StreamSummary
  /** Why a successful answer on a completion path could not be read at all. */
  readonly unreadable?: string
  readonly slo?: RouteSlo
  /** Seconds: a longer gap between content chunks is a stall. */
  readonly stallSeconds: number
  /** ms the response's bytes waited for the client's socket ('drain'); undefined when not a stream. */
  readonly clientWriteWaitMs?: number
}

export interface Measurement {
  readonly outcome: Outcome
  /** The status to label: the client's, else 499 (client left first) or 502 (no answer). */
  readonly statusCode: number
  readonly failure: FailureCode | undefined
  readonly failureDetail: string | undefined
  /** A provider error event inside the stream (its code or type). */
  readonly providerError: string | undefined
  readonly timing: Timing
  /** Output tokens: the provider's total when reported, else the streamed N. */
  readonly outputTokens: number
  readonly outputSource: TokenSource
  /** Input tokens the provider reported. */
  readonly inputTokens: number | undefined
  /** Reasoning tokens the provider reported (part of the output), never estimated. */
  readonly reasoningTokens: number | undefined
  /** Input tokens the provider reported as read from / written to its prompt cache (part of the input). */
  readonly cacheReadTokens: number | undefined
  readonly cacheWriteTokens: number | undefined
  /** Of the cache writes, the tokens written for an hour (Anthropic), where reported. */
  readonly cacheWrite1hTokens: number | undefined
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
  /** The upstream's own timings by phase (seconds), as it reported them. */
  readonly reported: ReportedTimes | undefined
  /** Speculative-decoding draft tokens proposed and accepted, as the upstream reported them. */
  readonly speculative: { readonly drafted: number; readonly accepted: number } | undefined
  /** TTFT − the reported queue + load + prompt time: the wait the upstream does not account for (network, TLS), ≥ 0. */
  readonly outsideUpstream: number | undefined
  /** Seconds a streamed response's bytes waited for the client's socket (0 when never). */
  readonly clientWriteWait: number | undefined
  /** The content marks with final token counts: the facts' log, or a copy scaled to the reported total. */
  readonly chunks: ChunkLog
}

/**
 * Decides everything about one finished request. Estimates are scaled to the reported total (so ITL and
 * TPOT agree with the bill) in a copy, so measuring twice (Server-Timing, then the close) gives one answer.
 */
export function measure(facts: ExchangeFacts): Measurement {
  const { summary } = facts
  let chunks = facts.chunks
  const outcome: Outcome = facts.clientGone
    ? Outcome.cancelled
    : facts.failure !== undefined || !isSuccess(facts.statusCode) || summary.error !== undefined
      ? Outcome.error
      : Outcome.ok

  const usage = validUsage(summary.usage)
  let source: TokenSource = TokenSource.estimate
  let estimateRatio: number | undefined
  if (usage?.output !== undefined) {
    source = TokenSource.usage
    if (!chunks.allExact && outcome !== Outcome.cancelled) {
      // Reasoning the provider counted but did not stream is not in the chunks.
      let streamedReasoning = false
      for (let i = 0; i < chunks.count && !streamedReasoning; i++)
        streamedReasoning = chunks.kind(i) === MarkKind.reasoning
      const visible = usage.output - (usage.reasoning !== undefined && !streamedReasoning ? usage.reasoning : 0)
      const estimated = totalTokens(chunks)
      if (outcome === Outcome.ok && chunks.count > 0 && visible > 0) estimateRatio = estimated / visible
      if (estimated !== visible) {
        const reconciled = chunks.copy()
        if (reconcileTokens(reconciled, visible)) chunks = reconciled
      }
    }
  } else if (chunks.count > 0 && chunks.allExact) {
    source = TokenSource.stream
  }
  const timing = summarize(facts.tReq, facts.tEnd, chunks)
  const statusCode =
    facts.statusCode !== 0
      ? facts.statusCode
      : outcome === Outcome.cancelled
        ? CLIENT_CLOSED_STATUS
        : NO_RESPONSE_STATUS
  const [itlP50, itlP99] = itlQuantiles(chunks, QUANTILES)
  // The embedding app's own answer (its rate limit, its key check) is its rule, not the service's latency: not judged.
  const slo =
    facts.slo === undefined || facts.failure === 'TOKENTAP_ERR_APP_ANSWERED'
      ? undefined
      : judgeSlo(facts.slo, { outcome, statusCode, timing, itlP99 })
  return {
    outcome,
    statusCode,
    failure: facts.failure,
    failureDetail: facts.failureDetail,
    providerError: summary.error,
    timing,
    outputTokens: usage?.output ?? timing.tokens,
    outputSource: source,
    inputTokens: usage?.input,
    reasoningTokens: usage?.reasoning,
    cacheReadTokens: usage?.cacheRead,
    cacheWriteTokens: usage?.cacheWrite,
    cacheWrite1hTokens: usage?.cacheWrite1h,
    headersSeconds: facts.tHeaders === undefined ? undefined : Math.max(0, facts.tHeaders - facts.tReq) / 1000,
    stalls: timing.chunks >= 2 ? countStalls(chunks, facts.stallSeconds) : 0,
    itlP50,
    itlP99,
    slo,
    estimateRatio: estimateRatio !== undefined && Number.isFinite(estimateRatio) ? estimateRatio : undefined,
    parseError:
      summary.parseError ??
      (usage !== summary.usage ? 'reported usage is not a token count: not used' : undefined) ??
      facts.unreadable,
    reported: summary.reported,
    speculative: summary.speculative,
    outsideUpstream: outsideUpstream(timing.ttft, reportedBeforeFirstToken(summary.reported)),
    clientWriteWait: facts.clientWriteWaitMs === undefined ? undefined : Math.max(0, facts.clientWriteWaitMs) / 1000,
    chunks,
  }
}

const QUANTILES = [0.5, 0.99] as const

/** The usage with only its counts, a last line for a parser that skipped readCount; the same object when all are. */
function validUsage(usage: Usage | undefined): Usage | undefined {
  if (usage === undefined) return undefined
  const ok = (v: number | undefined): boolean => v === undefined || isCount(v)
  if (ok(usage.output) && ok(usage.input) && ok(usage.reasoning)) return usage
  const valid: Usage = {}
  if (usage.output !== undefined && isCount(usage.output)) valid.output = usage.output
  if (usage.input !== undefined && isCount(usage.input)) valid.input = usage.input
  if (usage.reasoning !== undefined && isCount(usage.reasoning)) valid.reasoning = usage.reasoning
  return valid
}

function outsideUpstream(ttft: number | undefined, before: number | undefined): number | undefined {
  if (ttft === undefined || before === undefined) return undefined
  return Math.max(0, ttft - before)
}
