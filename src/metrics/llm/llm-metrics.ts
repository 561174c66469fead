import type { Counter, CounterSeries } from '../prometheus/counter.ts'
import type { CollectedGauge } from '../prometheus/gauge.ts'
import { HistogramSeries, requestIdExemplar } from '../prometheus/histogram.ts'
import type { Histogram } from '../prometheus/histogram.ts'
import type { NativeOptions } from '../prometheus/histogram.ts'
import { LabelSlot, SERIES_LABELS } from '../../record/labels.ts'
import type { LabelSet } from '../../record/labels.ts'
import type { Observations } from '../../record/observations.ts'
import type { ErrorType } from '../../record/error-type.ts'
import type { Outcome, TokenSource } from '../../timing/measurement.ts'
import { FOLDED_FAMILY } from '../../record/label-fold.ts'
import { buildFamilies } from './families.ts'
import type { Buckets, Families, FamilySpec, FamilyTable } from './families.ts'
import { REPORTED_PHASES } from '../../parsers/reported-times.ts'
import type { ReportedPhase } from '../../parsers/reported-times.ts'

/**
 * The llm_ families as configuration, in scrape order, and `record()`: a plain map of one request's Observations
 * (record/observations.ts decides what is recorded; definitions in docs/metrics.md).
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
const OVERHEAD_BUCKETS = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
] as const
/** Time a stream's bytes waited for the client's socket: 1 ms … 60 s (0.1 s: the live page's slow client). */
const CLIENT_WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const
/** Burstiness: how many tokens one content chunk carries. */
const TOKENS_PER_CHUNK_BUCKETS = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64] as const
/** Estimate ÷ usage: dense around 1, where a good tokenizer lands. */
const ESTIMATE_RATIO_BUCKETS = [
  0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1, 1.01, 1.02, 1.05, 1.1, 1.15, 1.2, 1.25, 1.5, 2,
] as const

/** The llm_ families, in scrape order. */
const FAMILIES = {
  ttft: {
    name: 'llm_time_to_first_token_seconds',
    type: 'histogram',
    labels: 'inputBanded',
    buckets: 'ttft',
    help: 'Time to first token: first content chunk minus request headers received, once per request that produced content.',
  },
  itl: {
    name: 'llm_inter_token_latency_seconds',
    type: 'histogram',
    labels: 'banded',
    buckets: 'itl',
    help: 'Inter-token latency, token-weighted: each content chunk j>=2 adds k_j observations of gap_j/k_j (sum = t_last - t_first, count = N - k_1).',
  },
  interChunk: {
    name: 'llm_inter_chunk_latency_seconds',
    type: 'histogram',
    buckets: 'inter_chunk',
    help: 'Gap between consecutive content chunks (j>=2), once per gap: bursts and stalls as the reader sees them.',
  },
  tpot: {
    name: 'llm_time_per_output_token_seconds',
    type: 'histogram',
    labels: 'banded',
    buckets: 'tpot',
    help: 'Time per output token, request-weighted: (t_last - t_first)/(N - k_1), once per ok request with N - k_1 >= 1.',
  },
  e2e: {
    name: 'llm_request_duration_seconds',
    type: 'histogram',
    labels: 'inputBanded',
    extra: ['outcome'],
    buckets: 'e2e',
    help: 'End-to-end latency: last response byte written minus request headers received, every request.',
  },
  tps: {
    name: 'llm_output_tokens_per_second',
    type: 'histogram',
    buckets: 'tps',
    help: 'Per-user output tokens per second: N / E2E, once per ok streamed request with N >= 1.',
  },
  outputTokens: {
    name: 'llm_output_tokens_total',
    type: 'counter',
    extra: ['source'],
    help: 'Output tokens: the provider-reported count (source="usage") when given, else the streamed tokens counted exactly from per-token events (source="stream") or by the tokenizer (source="estimate").',
  },
  inputTokens: { name: 'llm_input_tokens_total', type: 'counter', help: 'Input tokens the provider reported.' },
  cachedInputTokens: {
    name: 'llm_cached_input_tokens_total',
    type: 'counter',
    extra: ['cache'],
    help: 'Input tokens the provider reported as read from (cache="read") or written to (cache="write") its prompt cache; part of llm_input_tokens_total.',
  },
  speculativeDraftTokens: {
    name: 'llm_speculative_draft_tokens_total',
    type: 'counter',
    help: "Speculative-decoding draft tokens the upstream proposed, as it reported them per request (vLLM's metrics.speculative_decoding.num_draft_tokens).",
  },
  speculativeAcceptedTokens: {
    name: 'llm_speculative_accepted_tokens_total',
    type: 'counter',
    help: "Speculative-decoding draft tokens the upstream accepted, bonus tokens excluded, as it reported them per request (vLLM's metrics.speculative_decoding.num_accepted_draft_tokens).",
  },
  reasoningTokens: {
    name: 'llm_reasoning_tokens_total',
    type: 'counter',
    help: 'Reasoning (thinking) output tokens the provider reported, never estimated; part of llm_output_tokens_total.',
  },
  requests: {
    name: 'llm_requests_total',
    type: 'counter',
    extra: ['outcome', 'status_code', 'error_type'],
    help: 'Proxied requests by outcome (ok, error, cancelled), HTTP status code and error_type (who is to blame: none, upstream_rate_limited, upstream_overloaded, upstream_error, upstream_timeout, upstream_unreachable, upstream_reset, stream_error, client_rejected, client_cancelled, client_timeout, policy, proxy_error, worker_exited).',
  },
  parseErrors: {
    name: 'llm_parse_errors_total',
    type: 'counter',
    help: 'Responses whose stream the parser gave up on (bytes still passed through unchanged).',
  },
  usageInjections: {
    name: 'llm_usage_injections_total',
    type: 'counter',
    help: "Streaming requests sent upstream with stream_options.include_usage added by the route's inject_usage (the added usage chunk is not passed to the client).",
  },
  inFlight: { name: 'llm_requests_in_flight', type: 'gauge', help: 'Requests whose response has not ended.' },
  maxGap: {
    name: 'llm_stream_max_gap_seconds',
    type: 'histogram',
    buckets: 'max_gap',
    help: 'Longest gap between consecutive content chunks of a request, once per request with 2 or more content chunks: the stall a reader notices.',
  },
  stalls: {
    name: 'llm_stream_stalls_total',
    type: 'counter',
    help: (o) => `Gaps between consecutive content chunks longer than metrics.stall_seconds (${o.stallSeconds} s).`,
  },
  tokensPerChunk: {
    name: 'llm_tokens_per_chunk',
    type: 'histogram',
    buckets: TOKENS_PER_CHUNK_BUCKETS,
    help: 'Output tokens k_j of each content chunk, first included (after reconciling with the provider usage): burstiness.',
  },
  headers: {
    name: 'llm_time_to_response_headers_seconds',
    type: 'histogram',
    buckets: 'ttft',
    help: 'Upstream response headers received minus request headers received, once per request the upstream answered.',
  },
  ttfot: {
    name: 'llm_time_to_first_output_token_seconds',
    type: 'histogram',
    buckets: 'ttft',
    help: 'First non-reasoning content chunk (text or tool call) minus request headers received; minus TTFT it is the visible thinking time.',
  },
  slo: {
    name: 'llm_slo_requests_total',
    type: 'counter',
    extra: ['slo'],
    help: 'Requests judged against their route SLO (TTFT <= slo.ttft_seconds and own ITL P99 <= slo.itl_p99_seconds), by slo="met"|"missed".',
  },
  estimateRatio: {
    name: 'llm_token_estimate_ratio',
    type: 'histogram',
    buckets: ESTIMATE_RATIO_BUCKETS,
    help: 'Tokenizer estimate of the streamed output divided by the provider-reported count, once per ok request with both.',
  },
  inputPerRequest: {
    name: 'llm_request_input_tokens',
    type: 'histogram',
    buckets: TOKEN_COUNT_BUCKETS,
    help: 'Input tokens of one request, once per request whose provider reported them: the prompt-length condition behind the latency figures.',
  },
  outputPerRequest: {
    name: 'llm_request_output_tokens',
    type: 'histogram',
    extra: ['source'],
    buckets: TOKEN_COUNT_BUCKETS,
    help: 'Output tokens of one request (as llm_output_tokens_total counts them, by source), once per request with output.',
  },
  concurrency: {
    name: 'llm_concurrent_requests',
    type: 'histogram',
    buckets: CONCURRENCY_BUCKETS,
    help: "The route's requests in flight when a request started, itself included, once per request.",
  },
  overhead: {
    name: 'llm_proxy_overhead_seconds',
    type: 'histogram',
    extra: ['phase'],
    buckets: OVERHEAD_BUCKETS,
    help: "The proxy's own cost, by phase: request = request headers received to the request head written upstream; first_chunk = the upstream read completing the first content chunk to that read written to the client; chunk = per request, the mean of read to written over its content reads.",
  },
  upstreamReported: {
    name: 'llm_upstream_reported_seconds',
    type: 'histogram',
    extra: ['phase'],
    buckets: 'e2e',
    help: "The upstream's own account of the request, by phase (queue, load, prompt, generation, total), once per request and phase the upstream reported.",
  },
  outsideUpstream: {
    name: 'llm_first_token_outside_upstream_seconds',
    type: 'histogram',
    buckets: 'ttft',
    help: "TTFT minus the upstream's reported queue + load + prompt time, for requests whose upstream reports them: the part of the first token's wait the upstream does not account for (network, TLS, its front door).",
  },
  clientWriteWait: {
    name: 'llm_client_write_wait_seconds',
    type: 'histogram',
    buckets: CLIENT_WAIT_BUCKETS,
    help: "Once per streamed request: total time its response's bytes waited in the proxy because the client's socket would not take them (write returned false, until drain); 0 when never.",
  },
  labelSetsFolded: {
    name: FOLDED_FAMILY,
    type: 'counter',
    help: 'Requests recorded under the overflow set (model and tenant "other") of their route because their label set (provider, model, route, tenant) was beyond limits.max_label_sets.',
  },
} as const satisfies FamilyTable

type FamilyId = keyof typeof FAMILIES
export type LlmFamilies = Families<typeof FAMILIES>
type SeriesFamily = { [K in FamilyId]: (typeof FAMILIES)[K]['type'] extends 'gauge' ? never : K }[FamilyId]

/** A series that takes one Observations field as it is. */
interface SeriesSpec {
  readonly family: SeriesFamily
  /** The values of the family's extra labels. */
  readonly extra?: readonly string[]
  /** `set`: made with the label set (its 0 shows from the set's first request); `value`: at its first value. */
  readonly made: 'set' | 'value'
  readonly value: (o: Observations) => number | undefined
  /** Observed with the request's exemplar (when exemplars are on). */
  readonly exemplar?: true
}

const SERIES: readonly SeriesSpec[] = [
  { family: 'ttft', made: 'set', value: (o) => o.ttft, exemplar: true },
  { family: 'tpot', made: 'set', value: (o) => o.tpot },
  { family: 'tps', made: 'set', value: (o) => o.tps },
  { family: 'inputTokens', made: 'set', value: (o) => o.inputTokens },
  { family: 'inputPerRequest', made: 'set', value: (o) => o.inputTokens },
  { family: 'cachedInputTokens', extra: ['read'], made: 'value', value: (o) => o.cacheReadTokens },
  { family: 'cachedInputTokens', extra: ['write'], made: 'value', value: (o) => o.cacheWriteTokens },
  { family: 'speculativeDraftTokens', made: 'value', value: (o) => o.speculative?.drafted },
  { family: 'speculativeAcceptedTokens', made: 'value', value: (o) => o.speculative?.accepted },
  { family: 'reasoningTokens', made: 'value', value: (o) => o.reasoningTokens },
  { family: 'parseErrors', made: 'value', value: (o) => (o.parseError === undefined ? undefined : 1) },
  { family: 'usageInjections', made: 'value', value: (o) => (o.usageInjected ? 1 : undefined) },
  // Counted under the overflow set's labels (the request's own, once folded).
  { family: 'labelSetsFolded', made: 'value', value: (o) => (o.labelSet.folded ? 1 : undefined) },
  { family: 'maxGap', made: 'set', value: (o) => o.maxGap, exemplar: true },
  { family: 'stalls', made: 'set', value: (o) => o.stalls },
  { family: 'headers', made: 'set', value: (o) => o.headers },
  { family: 'ttfot', made: 'set', value: (o) => o.ttfot },
  { family: 'estimateRatio', made: 'set', value: (o) => o.estimateRatio },
  { family: 'concurrency', made: 'set', value: (o) => o.concurrency },
  { family: 'overhead', extra: ['request'], made: 'set', value: (o) => o.proxy.request },
  { family: 'overhead', extra: ['first_chunk'], made: 'set', value: (o) => o.proxy.firstChunk },
  { family: 'overhead', extra: ['chunk'], made: 'set', value: (o) => o.proxy.chunk },
  { family: 'outsideUpstream', made: 'set', value: (o) => o.outsideUpstream },
  { family: 'clientWriteWait', made: 'set', value: (o) => o.clientWriteWait },
]

/** Room per SeriesSpec in `Bound.series`, one place per band of the widest band label. */
const BANDS = 6

/** Each SeriesSpec's band label (its family's `labels`), looked up once here rather than per request. */
const SERIES_KIND: readonly FamilySpec['labels'][] = SERIES.map((spec) => (FAMILIES[spec.family] as FamilySpec).labels)

type Series = HistogramSeries | CounterSeries

/** What one label set bound (on its LabelSet): each series made once. */
interface Bound {
  /** SERIES' series, by spec × BANDS + band. */
  readonly series: (Series | undefined)[]
  readonly interChunk: HistogramSeries
  readonly tokensPerChunk: HistogramSeries
  /** ITL by length band. */
  readonly itl: (HistogramSeries | undefined)[]
  /** E2E by input-length band and outcome. */
  readonly e2e: (Partial<Record<Outcome, HistogramSeries>> | undefined)[]
  /** llm_requests_total by outcome, error type and status code. */
  readonly requests: Partial<Record<Outcome, Partial<Record<ErrorType, Map<number, CounterSeries>>>>>
  readonly bySource: Partial<
    Record<TokenSource, { readonly tokens: CounterSeries; readonly perRequest: HistogramSeries }>
  >
  /** llm_upstream_reported_seconds by phase, each made at its first observation. */
  readonly reported: Partial<Record<ReportedPhase, HistogramSeries>>
  /** Only for label sets of routes with an SLO: both made at the first such request, so rate() sees the 0. */
  slo?: { readonly met: CounterSeries; readonly missed: CounterSeries }
}

export class LlmMetrics {
  readonly families: LlmFamilies
  readonly #slot = new LabelSlot<Bound>()
  readonly #options: LlmMetricsOptions
  readonly #wallSeconds: () => number

  constructor(
    buckets: Buckets,
    inFlight: (add: (labels: readonly string[], value: number) => void) => void,
    options: LlmMetricsOptions = { stallSeconds: 1, exemplars: false },
  ) {
    this.#options = options
    this.#wallSeconds = options.wallSeconds ?? (() => Date.now() / 1000)
    const base = options.labelNames ?? SERIES_LABELS
    const names = { base, banded: options.bandedLabelNames ?? base, inputBanded: options.inputBandedLabelNames ?? base }
    this.families = buildFamilies(FAMILIES, {
      names,
      buckets,
      native: options.native,
      collect: inFlight,
      stallSeconds: options.stallSeconds,
    })
  }

  /** Every metric, in scrape order. */
  all(): readonly (Histogram | Counter | CollectedGauge)[] {
    return Object.values(this.families)
  }

  #bound(set: LabelSet): Bound {
    const f = this.families
    const v = set.values as string[]
    return this.#slot.put(set, {
      series: [],
      interChunk: f.interChunk.labels(...v),
      tokensPerChunk: f.tokensPerChunk.labels(...v),
      itl: [],
      e2e: [],
      requests: {},
      bySource: {},
      reported: {},
    })
  }

  /** Records one finished request: each of its Observations on its family, in one pass. */
  record(o: Observations): void {
    const f = this.families
    const set = o.labelSet
    const b = this.#slot.get(set) ?? this.#bound(set)
    f.inFlight.touchKey(set.key, set.values)
    // Exemplars carry wall-clock time (OpenMetrics), read once per request and only when asked for.
    const exemplar = this.#options.exemplars ? requestIdExemplar(o.who.id, o.trace) : undefined
    const now = exemplar === undefined ? 0 : this.#wallSeconds()
    for (let i = 0; i < SERIES.length; i++) {
      const spec = SERIES[i]
      const value = spec.value(o)
      if (value === undefined && spec.made === 'value') continue
      const kind = SERIES_KIND[i]
      const band = kind === 'banded' ? o.lengthBand : kind === 'inputBanded' ? o.inputLengthBand : 0
      const at = i * BANDS + band
      let s = b.series[at]
      if (s === undefined) {
        const values =
          kind === 'banded'
            ? set.banded[band].values
            : kind === 'inputBanded'
              ? set.inputBanded[band].values
              : set.values
        s = f[spec.family].labels(...values, ...(spec.extra ?? []))
        b.series[at] = s
      }
      if (value === undefined) continue
      if (s instanceof HistogramSeries) observe(s, value, 1, spec.exemplar === true ? exemplar : undefined, now)
      else s.inc(value)
    }
    // Looked up by value, not by a key string built per request.
    b.requests[o.outcome] ??= {}
    const byOutcome = b.requests[o.outcome] as Partial<Record<ErrorType, Map<number, CounterSeries>>>
    byOutcome[o.errorClass] ??= new Map()
    const byStatus = byOutcome[o.errorClass] as Map<number, CounterSeries>
    let requests = byStatus.get(o.statusCode)
    if (requests === undefined) {
      requests = f.requests.labels(...set.values, o.outcome, String(o.statusCode), o.errorClass)
      byStatus.set(o.statusCode, requests)
    }
    requests.inc()
    b.e2e[o.inputLengthBand] ??= {}
    const e2eByOutcome = b.e2e[o.inputLengthBand] as Partial<Record<Outcome, HistogramSeries>>
    e2eByOutcome[o.outcome] ??= f.e2e.labels(...set.inputBanded[o.inputLengthBand].values, o.outcome)
    const e2e = e2eByOutcome[o.outcome] as HistogramSeries
    observe(e2e, o.e2e, 1, exemplar, now)
    const runs = o.chunkTokens
    for (let r = 0; r < runs.count; r++) b.tokensPerChunk.observe(runs.tokens[r], runs.times[r])
    const gaps = o.gaps
    b.itl[o.lengthBand] ??= f.itl.labels(...set.banded[o.lengthBand].values)
    const itl = b.itl[o.lengthBand] as HistogramSeries
    for (let r = 0; r < gaps.count; r++) {
      const g = gaps.seconds[r]
      const k = gaps.tokens[r]
      b.interChunk.observe(g, gaps.times[r])
      // A chunk of 0 tokens has weight 0: no ITL observation.
      observe(itl, g / k, k * gaps.times[r], exemplar, now)
    }
    if (o.sloJudged) {
      b.slo ??= { met: f.slo.labels(...set.values, 'met'), missed: f.slo.labels(...set.values, 'missed') }
      if (o.slo !== undefined) b.slo[o.slo].inc()
    }
    if (o.outputTokens !== undefined) {
      const source = o.outputSource
      b.bySource[source] ??= {
        tokens: f.outputTokens.labels(...set.values, source),
        perRequest: f.outputPerRequest.labels(...set.values, source),
      }
      const output = b.bySource[source]
      output.tokens.inc(o.outputTokens)
      output.perRequest.observe(o.outputTokens)
    }
    const reported = o.upstreamReported
    if (reported !== undefined) {
      for (const phase of REPORTED_PHASES) {
        const seconds = reported[phase]
        if (seconds === undefined) continue
        b.reported[phase] ??= f.upstreamReported.labels(...set.values, phase)
        b.reported[phase].observe(seconds)
      }
    }
  }
}

/** An observation, with the request's exemplar when exemplars are on. */
function observe(s: HistogramSeries, value: number, weight: number, exemplar: string | undefined, now: number): void {
  if (exemplar === undefined) s.observe(value, weight)
  else s.observeWithExemplar(value, weight, exemplar, now)
}
