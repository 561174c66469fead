import { Counter } from '../prometheus/counter.ts'
import type { CounterSeries } from '../prometheus/counter.ts'
import { CollectedGauge } from '../prometheus/gauge.ts'
import { Histogram, requestIdExemplar } from '../prometheus/histogram.ts'
import type { HistogramSeries, NativeOptions } from '../prometheus/histogram.ts'
import { SERIES_LABELS } from '../../record/observations.ts'
import type { Observations } from '../../record/observations.ts'
import type { Outcome, TokenSource } from '../../timing/measurement.ts'
import { DEFAULT_BUCKETS } from '../../config/schema.ts'
import { FOLDED_FAMILY } from '../../record/label-fold.ts'
import type { Config } from '../../config/schema.ts'
import { REPORTED_PHASES } from '../../parsers/reported-times.ts'
import type { ReportedPhase } from '../../parsers/reported-times.ts'

/**
 * The llm_ Prometheus families: definitions, and `record()` of one finished request, a plain
 * map of its Observations (record/observations.ts decides what is recorded). Knows nothing of
 * HTTP. Definitions: ../../docs/metrics.md.
 */

export interface LlmMetricsOptions {
  /** A gap between content chunks longer than this (seconds) is a stall. */
  readonly stallSeconds: number
  /** Attach request ids as exemplars to TTFT, ITL, E2E (and max-gap) buckets. */
  readonly exemplars: boolean
  /** The label names of every series before its own (the policy's: SERIES_LABELS, plus `tenant` when on). */
  readonly labelNames?: readonly string[]
  /** The label names of the ITL and TPOT series (the policy's: `length_band` when on). */
  readonly bandedLabelNames?: readonly string[]
  /** The TTFT and E2E series' label names (`labelNames` plus `input_length_band` when on; E2E adds `outcome`). */
  readonly inputBandedLabelNames?: readonly string[]
  /** Native histograms beside the classic buckets (`metrics.native_histograms`). */
  readonly native?: NativeOptions
  /** Wall-clock seconds for exemplar timestamps (default Date.now() / 1000). */
  readonly wallSeconds?: () => number
}

/** Per-request token counts: 1 … 1M, ×4. */
const TOKEN_COUNT_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576] as const
/** A route's requests in flight: 1 … 4096, ×2. */
const CONCURRENCY_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096] as const
/** The proxy's own cost: 10 µs … 100 ms. */
const OVERHEAD_BUCKETS = [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1] as const

/** The `phase` values of llm_proxy_overhead_seconds. */
const OverheadPhase = { request: 'request', firstChunk: 'first_chunk', chunk: 'chunk' } as const

/** Time a stream's bytes waited for the client's socket: 1 ms … 60 s (0.1 s: the live page's slow client). */
const CLIENT_WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const

/** Burstiness: how many tokens one content chunk carries. */
const TOKENS_PER_CHUNK_BUCKETS = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64] as const
/** Estimate ÷ usage: dense around 1, where a good tokenizer lands. */
const ESTIMATE_RATIO_BUCKETS = [0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1, 1.01, 1.02, 1.05, 1.1, 1.15, 1.2, 1.25, 1.5, 2] as const

/** One label set's bound children, so a request looks its series up once. */
interface Bound {
  readonly interChunk: HistogramSeries
  readonly tps: HistogramSeries
  readonly input: CounterSeries
  /** Made at the first request whose provider reported them: most label sets never have one. */
  cacheRead?: CounterSeries
  cacheWrite?: CounterSeries
  drafted?: CounterSeries
  accepted?: CounterSeries
  reasoning?: CounterSeries
  readonly maxGap: HistogramSeries
  readonly stalls: CounterSeries
  readonly tokensPerChunk: HistogramSeries
  readonly headers: HistogramSeries
  readonly ttfot: HistogramSeries
  readonly estimateRatio: HistogramSeries
  readonly inputPerRequest: HistogramSeries
  readonly concurrency: HistogramSeries
  readonly overheadRequest: HistogramSeries
  readonly overheadFirstChunk: HistogramSeries
  readonly overheadChunk: HistogramSeries
  readonly outsideUpstream: HistogramSeries
  readonly clientWriteWait: HistogramSeries
  /** llm_upstream_reported_seconds by phase, each made at its first observation. */
  readonly reported: Partial<Record<ReportedPhase, HistogramSeries>>
  /** Only for label sets of routes with an SLO: both made at the first such request, so rate() sees the 0. */
  slo?: { readonly met: CounterSeries; readonly missed: CounterSeries }
  /** The series with one more label, each made at its first request (so in the same order as before). */
  readonly byOutcome: Partial<Record<Outcome, { readonly requests: Map<string, CounterSeries> }>>
  readonly bySource: Partial<Record<TokenSource, { readonly tokens: CounterSeries; readonly perRequest: HistogramSeries }>>
}

export class LlmMetrics {
  readonly ttft: Histogram
  readonly itl: Histogram
  readonly interChunk: Histogram
  readonly tpot: Histogram
  readonly e2e: Histogram
  readonly tps: Histogram
  readonly outputTokens: Counter
  readonly inputTokens: Counter
  readonly cachedInputTokens: Counter
  readonly reasoningTokens: Counter
  readonly speculativeDraftTokens: Counter
  readonly speculativeAcceptedTokens: Counter
  readonly requests: Counter
  readonly parseErrors: Counter
  readonly usageInjections: Counter
  readonly inFlight: CollectedGauge
  readonly maxGap: Histogram
  readonly stalls: Counter
  readonly tokensPerChunk: Histogram
  readonly headers: Histogram
  readonly ttfot: Histogram
  readonly slo: Counter
  readonly estimateRatio: Histogram
  readonly inputPerRequest: Histogram
  readonly outputPerRequest: Histogram
  readonly concurrency: Histogram
  readonly overhead: Histogram
  readonly upstreamReported: Histogram
  readonly outsideUpstream: Histogram
  readonly clientWriteWait: Histogram
  readonly labelSetsFolded: Counter
  readonly #bound = new Map<string, Bound>()
  /** ITL and TPOT series by the banded key (the same as the label set's with `length_band` off). */
  readonly #banded = new Map<string, { readonly itl: HistogramSeries; readonly tpot: HistogramSeries }>()
  /** TTFT and E2E (by outcome) series by the input-banded key (the label set's with `input_length_band` off). */
  readonly #inputBanded = new Map<string, { readonly ttft: HistogramSeries; readonly e2e: Partial<Record<Outcome, HistogramSeries>> }>()
  readonly #options: LlmMetricsOptions
  readonly #wallSeconds: () => number

  constructor(buckets: Config['metrics']['buckets'], inFlight: (add: (labels: readonly string[], value: number) => void) => void, options: LlmMetricsOptions = { stallSeconds: 1, exemplars: false }) {
    this.#options = options
    this.#wallSeconds = options.wallSeconds ?? (() => Date.now() / 1000)
    const labelNames = options.labelNames ?? SERIES_LABELS
    const native = options.native
    const inputBanded = options.inputBandedLabelNames ?? labelNames
    this.ttft = new Histogram({
      name: 'llm_time_to_first_token_seconds',
      help: 'Time to first token: first content chunk minus request headers received, once per request that produced content.',
      labelNames: inputBanded,
      buckets: buckets.ttft,
      native,
    })
    const banded = options.bandedLabelNames ?? labelNames
    this.itl = new Histogram({
      name: 'llm_inter_token_latency_seconds',
      help: 'Inter-token latency, token-weighted: each content chunk j>=2 adds k_j observations of gap_j/k_j (sum = t_last - t_first, count = N - k_1).',
      labelNames: banded,
      buckets: buckets.itl,
      native,
    })
    this.interChunk = new Histogram({
      name: 'llm_inter_chunk_latency_seconds',
      help: 'Gap between consecutive content chunks (j>=2), once per gap: bursts and stalls as the reader sees them.',
      labelNames,
      buckets: buckets.inter_chunk,
      native,
    })
    this.tpot = new Histogram({
      name: 'llm_time_per_output_token_seconds',
      help: 'Time per output token, request-weighted: (t_last - t_first)/(N - k_1), once per ok request with N - k_1 >= 1.',
      labelNames: banded,
      buckets: buckets.tpot,
      native,
    })
    this.e2e = new Histogram({
      name: 'llm_request_duration_seconds',
      help: 'End-to-end latency: last response byte written minus request headers received, every request.',
      labelNames: [...inputBanded, 'outcome'],
      buckets: buckets.e2e,
      native,
    })
    this.tps = new Histogram({
      name: 'llm_output_tokens_per_second',
      help: 'Per-user output tokens per second: N / E2E, once per ok streamed request with N >= 1.',
      labelNames,
      buckets: buckets.tps,
      native,
    })
    this.outputTokens = new Counter({
      name: 'llm_output_tokens_total',
      help: 'Output tokens: the provider-reported count (source="usage") when given, else the streamed tokens counted exactly from per-token events (source="stream") or by the tokenizer (source="estimate").',
      labelNames: [...labelNames, 'source'],
    })
    this.inputTokens = new Counter({
      name: 'llm_input_tokens_total',
      help: 'Input tokens the provider reported.',
      labelNames,
    })
    this.cachedInputTokens = new Counter({
      name: 'llm_cached_input_tokens_total',
      help: 'Input tokens the provider reported as read from (cache="read") or written to (cache="write") its prompt cache; part of llm_input_tokens_total.',
      labelNames: [...labelNames, 'cache'],
    })
    this.reasoningTokens = new Counter({
      name: 'llm_reasoning_tokens_total',
      help: 'Reasoning (thinking) output tokens the provider reported, never estimated; part of llm_output_tokens_total.',
      labelNames,
    })
    this.speculativeDraftTokens = new Counter({
      name: 'llm_speculative_draft_tokens_total',
      help: "Speculative-decoding draft tokens the upstream proposed, as it reported them per request (vLLM's metrics.speculative_decoding.num_draft_tokens).",
      labelNames,
    })
    this.speculativeAcceptedTokens = new Counter({
      name: 'llm_speculative_accepted_tokens_total',
      help: "Speculative-decoding draft tokens the upstream accepted, bonus tokens excluded, as it reported them per request (vLLM's metrics.speculative_decoding.num_accepted_draft_tokens).",
      labelNames,
    })
    this.requests = new Counter({
      name: 'llm_requests_total',
      help: 'Proxied requests by outcome (ok, error, cancelled), HTTP status code and error_type (who is to blame: none, upstream_rate_limited, upstream_overloaded, upstream_error, upstream_timeout, upstream_unreachable, upstream_reset, stream_error, client_rejected, client_cancelled, client_timeout, policy, proxy_error, worker_exited).',
      labelNames: [...labelNames, 'outcome', 'status_code', 'error_type'],
    })
    this.parseErrors = new Counter({
      name: 'llm_parse_errors_total',
      help: 'Responses whose stream the parser gave up on (bytes still passed through unchanged).',
      labelNames,
    })
    this.usageInjections = new Counter({
      name: 'llm_usage_injections_total',
      help: "Streaming requests sent upstream with stream_options.include_usage added by the route's inject_usage (the added usage chunk is not passed to the client).",
      labelNames,
    })
    this.inFlight = new CollectedGauge({
      name: 'llm_requests_in_flight',
      help: 'Requests whose response has not ended.',
      labelNames,
      collect: inFlight,
    })
    this.maxGap = new Histogram({
      name: 'llm_stream_max_gap_seconds',
      help: 'Longest gap between consecutive content chunks of a request, once per request with 2 or more content chunks: the stall a reader notices.',
      labelNames,
      buckets: buckets.max_gap ?? DEFAULT_BUCKETS.max_gap,
      native,
    })
    this.stalls = new Counter({
      name: 'llm_stream_stalls_total',
      help: `Gaps between consecutive content chunks longer than metrics.stall_seconds (${options.stallSeconds} s).`,
      labelNames,
    })
    this.tokensPerChunk = new Histogram({
      name: 'llm_tokens_per_chunk',
      help: 'Output tokens k_j of each content chunk, first included (after reconciling with the provider usage): burstiness.',
      labelNames,
      buckets: TOKENS_PER_CHUNK_BUCKETS,
      native,
    })
    this.headers = new Histogram({
      name: 'llm_time_to_response_headers_seconds',
      help: 'Upstream response headers received minus request headers received, once per request the upstream answered.',
      labelNames,
      buckets: buckets.ttft,
      native,
    })
    this.ttfot = new Histogram({
      name: 'llm_time_to_first_output_token_seconds',
      help: 'First non-reasoning content chunk (text or tool call) minus request headers received; minus TTFT it is the visible thinking time.',
      labelNames,
      buckets: buckets.ttft,
      native,
    })
    this.slo = new Counter({
      name: 'llm_slo_requests_total',
      help: 'Requests judged against their route SLO (TTFT <= slo.ttft_seconds and own ITL P99 <= slo.itl_p99_seconds), by slo="met"|"missed".',
      labelNames: [...labelNames, 'slo'],
    })
    this.estimateRatio = new Histogram({
      name: 'llm_token_estimate_ratio',
      help: 'Tokenizer estimate of the streamed output divided by the provider-reported count, once per ok request with both.',
      labelNames,
      buckets: ESTIMATE_RATIO_BUCKETS,
      native,
    })
    this.inputPerRequest = new Histogram({
      name: 'llm_request_input_tokens',
      help: 'Input tokens of one request, once per request whose provider reported them: the prompt-length condition behind the latency figures.',
      labelNames,
      buckets: TOKEN_COUNT_BUCKETS,
      native,
    })
    this.outputPerRequest = new Histogram({
      name: 'llm_request_output_tokens',
      help: 'Output tokens of one request (as llm_output_tokens_total counts them, by source), once per request with output.',
      labelNames: [...labelNames, 'source'],
      buckets: TOKEN_COUNT_BUCKETS,
      native,
    })
    this.concurrency = new Histogram({
      name: 'llm_concurrent_requests',
      help: "The route's requests in flight when a request started, itself included, once per request.",
      labelNames,
      buckets: CONCURRENCY_BUCKETS,
      native,
    })
    this.overhead = new Histogram({
      name: 'llm_proxy_overhead_seconds',
      help: "The proxy's own cost, by phase: request = request headers received to the request head written upstream; first_chunk = the upstream read completing the first content chunk to that read written to the client; chunk = per request, the mean of read to written over its content reads.",
      labelNames: [...labelNames, 'phase'],
      buckets: OVERHEAD_BUCKETS,
      native,
    })
    this.upstreamReported = new Histogram({
      name: 'llm_upstream_reported_seconds',
      help: "The upstream's own account of the request, by phase (queue, load, prompt, generation, total), once per request and phase the upstream reported.",
      labelNames: [...labelNames, 'phase'],
      buckets: buckets.e2e,
      native,
    })
    this.outsideUpstream = new Histogram({
      name: 'llm_first_token_outside_upstream_seconds',
      help: "TTFT minus the upstream's reported queue + load + prompt time, for requests whose upstream reports them: the part of the first token's wait the upstream does not account for (network, TLS, its front door).",
      labelNames,
      buckets: buckets.ttft,
      native,
    })
    this.clientWriteWait = new Histogram({
      name: 'llm_client_write_wait_seconds',
      help: "Once per streamed request: total time its response's bytes waited in the proxy because the client's socket would not take them (write returned false, until drain); 0 when never.",
      labelNames,
      buckets: CLIENT_WAIT_BUCKETS,
      native,
    })
    this.labelSetsFolded = new Counter({
      name: FOLDED_FAMILY,
      help: 'Requests recorded under the overflow set (model and tenant "other") of their route because their label set (provider, model, route, tenant) was beyond limits.max_label_sets.',
      labelNames,
    })
  }

  /** Every metric, in scrape order. */
  all(): readonly (Histogram | Counter | CollectedGauge)[] {
    return [
      this.ttft,
      this.itl,
      this.interChunk,
      this.tpot,
      this.e2e,
      this.tps,
      this.outputTokens,
      this.inputTokens,
      this.cachedInputTokens,
      this.speculativeDraftTokens,
      this.speculativeAcceptedTokens,
      this.reasoningTokens,
      this.requests,
      this.parseErrors,
      this.usageInjections,
      this.inFlight,
      this.maxGap,
      this.stalls,
      this.tokensPerChunk,
      this.headers,
      this.ttfot,
      this.slo,
      this.estimateRatio,
      this.inputPerRequest,
      this.outputPerRequest,
      this.concurrency,
      this.overhead,
      this.upstreamReported,
      this.outsideUpstream,
      this.clientWriteWait,
      this.labelSetsFolded,
    ]
  }

  #boundFor(o: Observations): Bound {
    let b = this.#bound.get(o.key)
    if (b === undefined) {
      const v = o.labelValues as string[]
      b = {
        interChunk: this.interChunk.labels(...v),
        tps: this.tps.labels(...v),
        input: this.inputTokens.labels(...v),
        maxGap: this.maxGap.labels(...v),
        stalls: this.stalls.labels(...v),
        tokensPerChunk: this.tokensPerChunk.labels(...v),
        headers: this.headers.labels(...v),
        ttfot: this.ttfot.labels(...v),
        estimateRatio: this.estimateRatio.labels(...v),
        inputPerRequest: this.inputPerRequest.labels(...v),
        concurrency: this.concurrency.labels(...v),
        overheadRequest: this.overhead.labels(...v, OverheadPhase.request),
        overheadFirstChunk: this.overhead.labels(...v, OverheadPhase.firstChunk),
        overheadChunk: this.overhead.labels(...v, OverheadPhase.chunk),
        outsideUpstream: this.outsideUpstream.labels(...v),
        clientWriteWait: this.clientWriteWait.labels(...v),
        reported: {},
        byOutcome: {},
        bySource: {},
      }
      this.#bound.set(o.key, b)
    }
    return b
  }

  #bandedFor(o: Observations): { readonly itl: HistogramSeries; readonly tpot: HistogramSeries } {
    let b = this.#banded.get(o.bandedKey)
    if (b === undefined) {
      const v = o.bandedValues as string[]
      b = { itl: this.itl.labels(...v), tpot: this.tpot.labels(...v) }
      this.#banded.set(o.bandedKey, b)
    }
    return b
  }

  #inputBandedFor(o: Observations): { readonly ttft: HistogramSeries; readonly e2e: Partial<Record<Outcome, HistogramSeries>> } {
    let b = this.#inputBanded.get(o.inputBandedKey)
    if (b === undefined) {
      b = { ttft: this.ttft.labels(...(o.inputBandedValues as string[])), e2e: {} }
      this.#inputBanded.set(o.inputBandedKey, b)
    }
    return b
  }

  /** Records one finished request: each of its Observations on its family, in one pass. */
  record(o: Observations): void {
    const b = this.#boundFor(o)
    const banded = this.#bandedFor(o)
    this.inFlight.touchKey(o.key, o.labelValues)
    let byOutcome = b.byOutcome[o.outcome]
    if (byOutcome === undefined) {
      byOutcome = { requests: new Map() }
      b.byOutcome[o.outcome] = byOutcome
    }
    const requestsKey = `${o.statusCode}\u0000${o.errorClass}`
    let requests = byOutcome.requests.get(requestsKey)
    if (requests === undefined) {
      requests = this.requests.labels(...o.labelValues, o.outcome, String(o.statusCode), o.errorClass)
      byOutcome.requests.set(requestsKey, requests)
    }
    requests.inc()
    // Made at the first fold: the labels are the overflow set's (the request's own, once folded).
    if (o.labelSetFolded) this.labelSetsFolded.labels(...o.labelValues).inc()
    // Exemplars carry wall-clock time (OpenMetrics), read once per request and only when asked for.
    const exemplar = this.#options.exemplars ? requestIdExemplar(o.id, o.trace) : undefined
    const now = exemplar === undefined ? 0 : this.#wallSeconds()
    const inputBanded = this.#inputBandedFor(o)
    let e2e = inputBanded.e2e[o.outcome]
    if (e2e === undefined) {
      e2e = this.e2e.labels(...o.inputBandedValues, o.outcome)
      inputBanded.e2e[o.outcome] = e2e
    }
    observe(e2e, o.e2e, 1, exemplar, now)
    if (o.ttft !== undefined) observe(inputBanded.ttft, o.ttft, 1, exemplar, now)
    if (o.ttfot !== undefined) b.ttfot.observe(o.ttfot)
    if (o.headers !== undefined) b.headers.observe(o.headers)
    b.concurrency.observe(o.concurrency)
    const runs = o.chunkTokens
    for (let r = 0; r < runs.count; r++) b.tokensPerChunk.observe(runs.tokens[r], runs.times[r])
    const gaps = o.gaps
    const itl = banded.itl
    for (let r = 0; r < gaps.count; r++) {
      const g = gaps.seconds[r]
      const k = gaps.tokens[r]
      b.interChunk.observe(g, gaps.times[r])
      // A chunk of 0 tokens has weight 0: no ITL observation.
      observe(itl, g / k, k * gaps.times[r], exemplar, now)
    }
    if (o.maxGap !== undefined) observe(b.maxGap, o.maxGap, 1, exemplar, now)
    b.stalls.inc(o.stalls)
    if (o.sloJudged) {
      b.slo ??= { met: this.slo.labels(...o.labelValues, 'met'), missed: this.slo.labels(...o.labelValues, 'missed') }
      if (o.slo !== undefined) b.slo[o.slo].inc()
    }
    if (o.estimateRatio !== undefined) b.estimateRatio.observe(o.estimateRatio)
    if (o.tpot !== undefined) banded.tpot.observe(o.tpot)
    if (o.tps !== undefined) b.tps.observe(o.tps)
    if (o.outputTokens !== undefined) {
      const source = o.outputSource
      let output = b.bySource[source]
      if (output === undefined) {
        output = { tokens: this.outputTokens.labels(...o.labelValues, source), perRequest: this.outputPerRequest.labels(...o.labelValues, source) }
        b.bySource[source] = output
      }
      output.tokens.inc(o.outputTokens)
      output.perRequest.observe(o.outputTokens)
    }
    if (o.inputTokens !== undefined) {
      b.input.inc(o.inputTokens)
      b.inputPerRequest.observe(o.inputTokens)
    }
    if (o.cacheReadTokens !== undefined) {
      b.cacheRead ??= this.cachedInputTokens.labels(...o.labelValues, 'read')
      b.cacheRead.inc(o.cacheReadTokens)
    }
    if (o.speculative !== undefined) {
      b.drafted ??= this.speculativeDraftTokens.labels(...o.labelValues)
      b.accepted ??= this.speculativeAcceptedTokens.labels(...o.labelValues)
      b.drafted.inc(o.speculative.drafted)
      b.accepted.inc(o.speculative.accepted)
    }
    if (o.cacheWriteTokens !== undefined) {
      b.cacheWrite ??= this.cachedInputTokens.labels(...o.labelValues, 'write')
      b.cacheWrite.inc(o.cacheWriteTokens)
    }
    if (o.reasoningTokens !== undefined) {
      b.reasoning ??= this.reasoningTokens.labels(...o.labelValues)
      b.reasoning.inc(o.reasoningTokens)
    }
    if (o.overheadRequest !== undefined) b.overheadRequest.observe(o.overheadRequest)
    if (o.overheadFirstChunk !== undefined) b.overheadFirstChunk.observe(o.overheadFirstChunk)
    if (o.overheadChunk !== undefined) b.overheadChunk.observe(o.overheadChunk)
    const reported = o.upstreamReported
    if (reported !== undefined) {
      for (const phase of REPORTED_PHASES) {
        const seconds = reported[phase]
        if (seconds === undefined) continue
        let series = b.reported[phase]
        if (series === undefined) {
          series = this.upstreamReported.labels(...o.labelValues, phase)
          b.reported[phase] = series
        }
        series.observe(seconds)
      }
    }
    if (o.outsideUpstream !== undefined) b.outsideUpstream.observe(o.outsideUpstream)
    if (o.clientWriteWait !== undefined) b.clientWriteWait.observe(o.clientWriteWait)
    // Made at their first count: most label sets never have one.
    if (o.usageInjected) this.usageInjections.labels(...o.labelValues).inc()
    if (o.parseError !== undefined) this.parseErrors.labels(...o.labelValues).inc()
  }
}

/** An observation, with the request's exemplar when exemplars are on. */
function observe(s: HistogramSeries, value: number, weight: number, exemplar: string | undefined, now: number): void {
  if (exemplar === undefined) s.observe(value, weight)
  else s.observeWithExemplar(value, weight, exemplar, now)
}
