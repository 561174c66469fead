import { inputLengthBandOf, lengthBandOf, Labels } from './labels.ts'
import type { LabelOptions, LabelSet, SeriesLabels } from './labels.ts'
import type { FailureCode } from '../errors.ts'
import type { ChunkLog } from '../timing/chunk-log.ts'
import { Outcome, TokenSource } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { SloVerdict } from '../timing/slo.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import { genAiOperation } from '../parsers/registry.ts'
import type { TraceIds, TraceStart } from './trace-context.ts'
import { keepTrace } from '../timing/trace-sampling.ts'
import type { TraceSampling } from '../timing/trace-sampling.ts'
import { errorTypeOf, realtimeErrorTypeOf } from './error-type.ts'
import type { ErrorType } from './error-type.ts'
import { requestCost } from '../cost/cost.ts'
import type { RequestCost } from '../cost/cost.ts'
import type { PriceTable } from '../cost/price-table.ts'
import { isSuccess } from '../http-status.ts'
import type { FinishedResponse } from '../timing/realtime-timing.ts'

export { INPUT_LENGTH_BANDS, LENGTH_BANDS } from './labels.ts'
export type { SeriesLabels } from './labels.ts'

/** A streamed request whose bytes waited longer than this (seconds) for the client's socket had a slow client. */
export const SLOW_CLIENT_SECONDS = 0.1

/**
 * The recording policy, the one home of every rule about what gets recorded: a finished request's Measurement and
 * identity in, its Observations out (ok-only gates, the output-token rule, bands, error types, bounded labels, trace
 * sampling). Sinks only map Observations onto their own shapes, with no conditions of their own.
 */

/**
 * Runs of equal content-chunk gaps: `times[r]` chunks each `seconds[r]` after the previous, carrying `tokens[r]`;
 * ITL observes seconds/tokens with weight tokens × times, so a fast stream is a few runs, not one per chunk.
 */
export interface GapRuns {
  readonly count: number
  readonly seconds: Float64Array
  readonly tokens: Float64Array
  readonly times: Float64Array
}

/** Runs of equal token counts k_j over every content chunk (the first included). */
interface TokenRuns {
  readonly count: number
  readonly tokens: Float64Array
  readonly times: Float64Array
}

/** The proxy's own cost (seconds): request head out, first content read through, mean content read through. */
interface ProxyOverhead {
  readonly request: number | undefined
  readonly firstChunk: number | undefined
  readonly chunk: number | undefined
}

/** Who a finished request was: what the exchange knows besides its Measurement. */
export interface RequestFacts {
  readonly id: string
  readonly route: { readonly label: string; readonly slo?: unknown }
  readonly provider: string
  /** The tenant label value, resolved once when the request opened; undefined with `metrics.tenant` off. */
  readonly tenant: string | undefined
  readonly method: string
  /** Path after the route prefix, without the query. */
  readonly path: string
  /** The request's own model (body, else path), else the response's; undefined when neither said. */
  readonly model: string | undefined
  readonly responseModel: string | undefined
  readonly usageInjected: boolean
  /** The route's requests in flight when it started, itself included. */
  readonly concurrency: number
  readonly bytesIn: number
  readonly bytesOut: number
  /** ms, monotonic: request headers received. */
  readonly tReq: number
  readonly overhead: ProxyOverhead
  /** Parser extras for the log line (e.g. Bedrock's stop reason). */
  readonly extra: Readonly<Record<string, unknown>> | undefined
  /** What the failure code leaves out (the upstream's own error code). */
  readonly failureDetail: string | undefined
  /** Its span's ids and the caller's span, with `otel.traces` on. */
  readonly trace?: TraceStart
}

/** The request's own figures for its log line, span and debug page: not gated like the aggregates (a cancelled TPOT is still its own). */
interface MeasuredFigures {
  readonly failure: FailureCode | undefined
  readonly providerError: string | undefined
  /** The provider's total when reported, else the streamed N (0 included). */
  readonly outputTokens: number
  readonly chunks: number
  readonly streamedTokens: number
  readonly tpot: number | undefined
  readonly tps: number | undefined
  /** The request's own token-weighted ITL quantiles. */
  readonly itlP50: number | undefined
  readonly itlP99: number | undefined
  /** The content chunks' arrival marks (the span's events). */
  readonly marks: ChunkLog
}

/** What every sink records of one finished request. Seconds; undefined: not observed. */
export interface Observations {
  readonly who: RequestFacts
  readonly labels: SeriesLabels
  readonly labelSet: LabelSet
  /** Index in INPUT_LENGTH_BANDS of the reported input count (TTFT and E2E series, the live page's prompt bands). */
  readonly inputLengthBand: number
  readonly outcome: Outcome
  readonly statusCode: number
  /** OpenTelemetry's `error.type`: undefined for ok. */
  readonly errorType: string | undefined
  /** The `error_type` label: who is to blame, from the error-type table (error-type.ts; `none` for ok). */
  readonly errorClass: ErrorType
  /** Index in LENGTH_BANDS of the output count (ITL and TPOT series, the live page's bands). */
  readonly lengthBand: number
  readonly e2e: number
  /** TTFT, whatever the outcome (a real wait). */
  readonly ttft: number | undefined
  /** TTFT of an ok request (OpenTelemetry's server-side time to first token). */
  readonly okTtft: number | undefined
  readonly ttfot: number | undefined
  readonly headers: number | undefined
  /** TPOT and per-user TPS, ok requests only. */
  readonly tpot: number | undefined
  readonly tps: number | undefined
  readonly maxGap: number | undefined
  readonly gaps: GapRuns
  readonly chunkTokens: TokenRuns
  readonly stalls: number
  /** Output tokens by the rule above, and their source. */
  readonly outputTokens: number | undefined
  readonly outputSource: TokenSource
  /** Input tokens the provider reported (0 included). */
  readonly inputTokens: number | undefined
  /** Reasoning tokens and cached input tokens (read, written) the provider reported (0 included); never estimated. */
  readonly reasoningTokens: number | undefined
  readonly cacheReadTokens: number | undefined
  readonly cacheWriteTokens: number | undefined
  readonly estimateRatio: number | undefined
  /** With `pricing:` set: the request's cost by token kind, and its tokens with no price (src/cost/cost.ts). */
  readonly cost: RequestCost | undefined
  readonly concurrency: number
  /** tokentap's own figures: what the proxy itself cost the request (llm_proxy_overhead_seconds). */
  readonly proxy: ProxyOverhead
  /** Speculative-decoding draft tokens proposed and accepted, where the upstream reported them. */
  readonly speculative: { readonly drafted: number; readonly accepted: number } | undefined
  /** The upstream's own timings by phase (seconds), each phase it reported once. */
  readonly upstreamReported: ReportedTimes | undefined
  /** TTFT − the upstream's reported queue + load + prompt, where it reported them. */
  readonly outsideUpstream: number | undefined
  /** Seconds a streamed response waited for the client's socket (0 included), once per streamed request. */
  readonly clientWriteWait: number | undefined
  /** That wait was over SLOW_CLIENT_SECONDS (the live page's share of slow clients); undefined when not streamed. */
  readonly slowClient: boolean | undefined
  /** The route has an SLO (its met/missed series exist from its first request on); the verdict when judged. */
  readonly sloJudged: boolean
  readonly slo: SloVerdict | undefined
  readonly usageInjected: boolean
  readonly parseError: string | undefined
  /** `gen_ai.operation.name`, when the request is a GenAI operation and the OTel metrics are on or its span is kept. */
  readonly operation: string | undefined
  /** The response's model, bounded like the model label (OpenTelemetry only). */
  readonly responseModel: string | undefined
  /** The request's span, when `otel.traces` keeps it (the span is exported and exemplars name it). */
  readonly trace: TraceIds | undefined
  /** ms, monotonic: when the response closed. */
  readonly endedAt: number
  readonly measured: MeasuredFigures
}

/** Realtime tokens by direction and modality, as the provider reported them. */
interface RealtimeTokens {
  readonly direction: 'input' | 'output'
  readonly modality: 'text' | 'audio'
  readonly count: number
}

/** What one finished realtime response adds to the llm_realtime_ families. */
export interface ResponseObservations {
  readonly labels: SeriesLabels
  readonly labelSet: LabelSet
  readonly outcome: Outcome
  /** Who is to blame (the `error_type` label): `none` for ok, by the error-type table (error-type.ts). */
  readonly errorType: ErrorType
  readonly ttft: number | undefined
  readonly ttfa: number | undefined
  /** Token-weighted ITL: pairs of value and weight. */
  readonly itl: readonly (readonly [number, number])[]
  /** Undefined for a response without audio. */
  readonly underrun: number | undefined
  /** Provider-reported tokens, by direction and modality; only counts above 0. */
  readonly tokens: readonly RealtimeTokens[]
}

export interface RecordPolicyOptions extends LabelOptions {
  /** The OTel metrics are on: work out every request's GenAI operation and bounded response model (spans alone need only a kept one's operation). */
  readonly genAi: boolean
  /** `otel.traces` is on: which requests' spans are kept (trace-sampling.ts). */
  readonly traces?: TraceSampling
  /** `pricing:` is set: the prices each request's cost is worked out with. */
  readonly prices?: PriceTable
}

/** The error type a failed or cancelled request is reported with (OpenTelemetry's `error.type`). */
function errorType(m: Measurement): string | undefined {
  if (m.outcome === Outcome.ok) return undefined
  if (m.outcome === Outcome.cancelled) return 'cancelled'
  if (m.failure !== undefined) return m.failure
  return isSuccess(m.statusCode) ? 'provider_error' : String(m.statusCode)
}

const S = 1 / 1000
const NO_RUNS: GapRuns = {
  count: 0,
  seconds: new Float64Array(0),
  tokens: new Float64Array(0),
  times: new Float64Array(0),
}
const NO_TOKEN_RUNS: TokenRuns = { count: 0, tokens: new Float64Array(0), times: new Float64Array(0) }

/** The gaps of chunks j ≥ 2, equal neighbours folded into runs. */
function gapRuns(log: ChunkLog): GapRuns {
  const n = log.count
  if (n < 2) return NO_RUNS
  const seconds = new Float64Array(n - 1)
  const tokens = new Float64Array(n - 1)
  const times = new Float64Array(n - 1)
  let r = -1
  let prev = log.at(0)
  for (let i = 1; i < n; i++) {
    const at = log.at(i)
    const g = (at - prev) * S
    const k = log.tokens(i)
    prev = at
    if (r >= 0 && seconds[r] === g && tokens[r] === k) times[r]++
    else {
      r++
      seconds[r] = g
      tokens[r] = k
      times[r] = 1
    }
  }
  return { count: r + 1, seconds, tokens, times }
}

/** Every chunk's k_j, equal neighbours folded into runs. */
function tokenRuns(log: ChunkLog): TokenRuns {
  const n = log.count
  if (n === 0) return NO_TOKEN_RUNS
  const tokens = new Float64Array(n)
  const times = new Float64Array(n)
  let r = -1
  for (let i = 0; i < n; i++) {
    const k = log.tokens(i)
    if (r >= 0 && tokens[r] === k) times[r]++
    else {
      r++
      tokens[r] = k
      times[r] = 1
    }
  }
  return { count: r + 1, tokens, times }
}

export class RecordPolicy {
  /** The label sets every request and realtime session is recorded under (caps, budget, the one cache). */
  readonly labels: Labels
  readonly #options: RecordPolicyOptions

  constructor(options: RecordPolicyOptions) {
    this.#options = options
    this.labels = new Labels(options)
  }

  /**
   * The label values a request in flight is counted under at scrape time; admitting here as the request's end would,
   * so models in flight cannot pass the cap and linger at 0 in the gauge.
   */
  inFlightValues(
    provider: string,
    route: string,
    model: string | undefined,
    tenant: string | undefined,
  ): readonly string[] {
    return this.labels.of(provider, route, model, tenant).values
  }

  /** The label set a finished request or realtime session is counted under (admits its model while the route has room). */
  labelSetOf(who: {
    readonly provider: string
    readonly route: { readonly label: string }
    readonly model: string | undefined
    readonly tenant: string | undefined
  }): LabelSet {
    return this.labels.of(who.provider, who.route.label, who.model, who.tenant)
  }

  observe(who: RequestFacts, m: Measurement): Observations {
    const route = who.route.label
    const set = this.labels.of(who.provider, route, who.model, who.tenant)
    const t = m.timing
    const ok = m.outcome === Outcome.ok
    const genAi = this.#options.genAi
    const traces = this.#options.traces
    const trace =
      who.trace !== undefined && traces !== undefined && keepTrace(who.trace, m, traces) ? who.trace : undefined
    return {
      who,
      labels: set.labels,
      labelSet: set,
      inputLengthBand: inputLengthBandOf(m.inputTokens),
      outcome: m.outcome,
      statusCode: m.statusCode,
      errorType: errorType(m),
      errorClass: errorTypeOf(m),
      lengthBand: lengthBandOf(m.outputTokens),
      e2e: t.e2e,
      ttft: t.ttft,
      okTtft: ok ? t.ttft : undefined,
      ttfot: t.ttfot,
      headers: m.headersSeconds,
      tpot: ok ? t.tpot : undefined,
      tps: ok ? t.tps : undefined,
      maxGap: t.maxGap,
      gaps: gapRuns(m.chunks),
      chunkTokens: tokenRuns(m.chunks),
      stalls: m.stalls,
      // Reported (0 included) or streamed; nothing to count otherwise.
      outputTokens: m.outputSource === TokenSource.usage || m.outputTokens > 0 ? m.outputTokens : undefined,
      outputSource: m.outputSource,
      inputTokens: m.inputTokens,
      reasoningTokens: m.reasoningTokens,
      cacheReadTokens: m.cacheReadTokens,
      cacheWriteTokens: m.cacheWriteTokens,
      estimateRatio: m.estimateRatio,
      cost:
        this.#options.prices === undefined
          ? undefined
          : requestCost(this.#options.prices, who.provider, who.model, who.responseModel, m),
      concurrency: who.concurrency,
      proxy: who.overhead,
      upstreamReported: m.reported,
      speculative: m.speculative,
      outsideUpstream: m.outsideUpstream,
      clientWriteWait: m.clientWriteWait,
      slowClient: m.clientWriteWait === undefined ? undefined : m.clientWriteWait > SLOW_CLIENT_SECONDS,
      sloJudged: who.route.slo !== undefined,
      slo: m.slo,
      usageInjected: who.usageInjected,
      parseError: m.parseError,
      // Only the OTel metrics read it for every request; a span only when kept (most are sampled out).
      operation: genAi || trace !== undefined ? genAiOperation(who.method, who.path) : undefined,
      responseModel:
        genAi && who.responseModel !== undefined
          ? this.labels.model(`${route}\u0000response`, who.responseModel)
          : undefined,
      trace,
      endedAt: who.tReq + t.e2e * 1000,
      measured: {
        failure: m.failure,
        providerError: m.providerError,
        outputTokens: m.outputTokens,
        chunks: t.chunks,
        streamedTokens: t.tokens,
        tpot: t.tpot,
        tps: t.tps,
        itlP50: m.itlP50,
        itlP99: m.itlP99,
        marks: m.chunks,
      },
    }
  }

  /** A finished realtime response: latencies are observed whatever the outcome (a cancelled answer's first token still came). */
  observeResponse(set: LabelSet, r: FinishedResponse): ResponseObservations {
    const tokens: RealtimeTokens[] = []
    const u = r.usage
    if (u !== undefined) {
      if (u.inputText > 0) tokens.push({ direction: 'input', modality: 'text', count: u.inputText })
      if (u.inputAudio > 0) tokens.push({ direction: 'input', modality: 'audio', count: u.inputAudio })
      if (u.outputText > 0) tokens.push({ direction: 'output', modality: 'text', count: u.outputText })
      if (u.outputAudio > 0) tokens.push({ direction: 'output', modality: 'audio', count: u.outputAudio })
    }
    const t = r.timing
    return {
      labels: set.labels,
      labelSet: set,
      outcome: r.outcome,
      errorType: realtimeErrorTypeOf(r.outcome, r.detail, r.failure),
      ttft: t.ttft,
      ttfa: t.ttfa,
      itl: t.itl,
      underrun: t.underrun,
      tokens,
    }
  }
}
