import { Counter } from './counter.ts'
import type { CounterSeries } from './counter.ts'
import { CollectedGauge } from './gauge.ts'
import { Histogram, requestIdExemplar } from './histogram.ts'
import type { HistogramSeries } from './histogram.ts'
import { judgeSlo } from './slo.ts'
import type { RouteSlo } from './slo.ts'
import { countStalls, forEachChunkTokensRun, forEachGapRun, requestItlP99 } from '../timing/request-timing.ts'
import type { Timing } from '../timing/request-timing.ts'
import type { ChunkLog } from '../timing/chunk-log.ts'
import { DEFAULT_BUCKETS } from '../config/schema.ts'
import type { Config } from '../config/schema.ts'

/**
 * The llm_ metrics: definitions, and `record()` of one finished request. Knows nothing of HTTP:
 * it gets labels, an outcome, a status, the chunk log and its timing.
 * Definitions: ../../README.md#metrics.
 */

export const Outcome = { ok: 'ok', error: 'error', cancelled: 'cancelled' } as const
export type Outcome = (typeof Outcome)[keyof typeof Outcome]

/** `usage`: the provider reported the total; `stream`: counted exactly from per-token events (TGI native); `estimate`: tokenizer. */
export const TokenSource = { usage: 'usage', stream: 'stream', estimate: 'estimate' } as const
export type TokenSource = (typeof TokenSource)[keyof typeof TokenSource]

export interface Labels {
  readonly provider: string
  readonly model: string
  readonly route: string
}

export interface RequestRecord {
  readonly labels: Labels
  readonly outcome: Outcome
  readonly statusCode: number
  readonly timing: Timing
  readonly chunks: ChunkLog
  readonly outputTokens: number
  readonly outputSource: TokenSource
  readonly inputTokens: number | undefined
  /** t(response headers) − t_req, seconds, when the upstream answered. */
  readonly headersSeconds?: number
  /** The request's id (client's or upstream's x-request-id, else generated), for exemplars. */
  readonly requestId?: string
  /** The route's SLO, when it has one. */
  readonly slo?: RouteSlo
  /** Tokenizer estimate ÷ provider usage of the streamed output, when both exist. */
  readonly estimateRatio?: number
}

export interface LlmMetricsOptions {
  /** A gap between content chunks longer than this (seconds) is a stall. */
  readonly stallSeconds: number
  /** Attach request ids as exemplars to TTFT, ITL, E2E (and max-gap) buckets. */
  readonly exemplars: boolean
}

/** Burstiness: how many tokens one content chunk carries. */
export const TOKENS_PER_CHUNK_BUCKETS = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64] as const
/** Estimate ÷ usage: dense around 1, where a good tokenizer lands. */
export const ESTIMATE_RATIO_BUCKETS = [0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1, 1.01, 1.02, 1.05, 1.1, 1.15, 1.2, 1.25, 1.5, 2] as const

const BASE = ['provider', 'model', 'route'] as const

/** One label set's bound children, so a request looks its series up once. */
interface Bound {
  readonly ttft: HistogramSeries
  readonly itl: HistogramSeries
  readonly interChunk: HistogramSeries
  readonly tpot: HistogramSeries
  readonly tps: HistogramSeries
  readonly input: CounterSeries
  readonly maxGap: HistogramSeries
  readonly stalls: CounterSeries
  readonly tokensPerChunk: HistogramSeries
  readonly headers: HistogramSeries
  readonly ttfot: HistogramSeries
  readonly estimateRatio: HistogramSeries
  /** Only for label sets of routes with an SLO: both made at the first such request, so rate() sees the 0. */
  slo?: { readonly met: CounterSeries; readonly missed: CounterSeries }
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
  readonly #bound = new Map<string, Bound>()
  readonly #options: LlmMetricsOptions

  constructor(buckets: Config['metrics']['buckets'], inFlight: (add: (labels: readonly string[], value: number) => void) => void, options: LlmMetricsOptions = { stallSeconds: 1, exemplars: false }) {
    this.#options = options
    const labelNames = BASE
    this.ttft = new Histogram({
      name: 'llm_time_to_first_token_seconds',
      help: 'Time to first token: first content chunk minus request headers received, once per request that produced content.',
      labelNames,
      buckets: buckets.ttft,
    })
    this.itl = new Histogram({
      name: 'llm_inter_token_latency_seconds',
      help: 'Inter-token latency, token-weighted: each content chunk j>=2 adds k_j observations of gap_j/k_j (sum = t_last - t_first, count = N - k_1).',
      labelNames,
      buckets: buckets.itl,
    })
    this.interChunk = new Histogram({
      name: 'llm_inter_chunk_latency_seconds',
      help: 'Gap between consecutive content chunks (j>=2), once per gap: bursts and stalls as the reader sees them.',
      labelNames,
      buckets: buckets.inter_chunk,
    })
    this.tpot = new Histogram({
      name: 'llm_time_per_output_token_seconds',
      help: 'Time per output token, request-weighted: (t_last - t_first)/(N - k_1), once per ok request with N - k_1 >= 1.',
      labelNames,
      buckets: buckets.tpot,
    })
    this.e2e = new Histogram({
      name: 'llm_request_duration_seconds',
      help: 'End-to-end latency: last response byte written minus request headers received, every request.',
      labelNames: [...BASE, 'outcome'],
      buckets: buckets.e2e,
    })
    this.tps = new Histogram({
      name: 'llm_output_tokens_per_second',
      help: 'Per-user output tokens per second: N / E2E, once per ok streamed request with N >= 1.',
      labelNames,
      buckets: buckets.tps,
    })
    this.outputTokens = new Counter({
      name: 'llm_output_tokens_total',
      help: 'Output tokens: the provider-reported count (source="usage") when given, else the streamed tokens counted exactly from per-token events (source="stream") or by the tokenizer (source="estimate").',
      labelNames: [...BASE, 'source'],
    })
    this.inputTokens = new Counter({
      name: 'llm_input_tokens_total',
      help: 'Input tokens the provider reported.',
      labelNames,
    })
    this.requests = new Counter({
      name: 'llm_requests_total',
      help: 'Proxied requests by outcome (ok, error, cancelled) and HTTP status code.',
      labelNames: [...BASE, 'outcome', 'status_code'],
    })
    this.parseErrors = new Counter({
      name: 'llm_parse_errors_total',
      help: 'Responses whose stream the parser gave up on (bytes still passed through unchanged).',
      labelNames,
    })
    this.usageInjections = new Counter({
      name: 'llm_usage_injections_total',
      help: 'Streaming requests sent upstream with stream_options.include_usage added by the route\'s inject_usage (the added usage chunk is not passed to the client).',
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
    })
    this.headers = new Histogram({
      name: 'llm_time_to_response_headers_seconds',
      help: 'Upstream response headers received minus request headers received, once per request the upstream answered.',
      labelNames,
      buckets: buckets.ttft,
    })
    this.ttfot = new Histogram({
      name: 'llm_time_to_first_output_token_seconds',
      help: 'First non-reasoning content chunk (text or tool call) minus request headers received; minus TTFT it is the visible thinking time.',
      labelNames,
      buckets: buckets.ttft,
    })
    this.slo = new Counter({
      name: 'llm_slo_requests_total',
      help: 'Requests judged against their route SLO (TTFT <= slo.ttft_seconds and own ITL P99 <= slo.itl_p99_seconds), by slo="met"|"missed".',
      labelNames: [...BASE, 'slo'],
    })
    this.estimateRatio = new Histogram({
      name: 'llm_token_estimate_ratio',
      help: 'Tokenizer estimate of the streamed output divided by the provider-reported count, once per ok request with both.',
      labelNames,
      buckets: ESTIMATE_RATIO_BUCKETS,
    })
  }

  /** Every metric, in scrape order. */
  all(): readonly (Histogram | Counter | CollectedGauge)[] {
    return [this.ttft, this.itl, this.interChunk, this.tpot, this.e2e, this.tps, this.outputTokens, this.inputTokens, this.requests, this.parseErrors, this.usageInjections, this.inFlight, this.maxGap, this.stalls, this.tokensPerChunk, this.headers, this.ttfot, this.slo, this.estimateRatio]
  }

  #boundFor(l: Labels): Bound {
    const key = `${l.provider}\u0000${l.model}\u0000${l.route}`
    let b = this.#bound.get(key)
    if (b === undefined) {
      const v = [l.provider, l.model, l.route]
      b = {
        ttft: this.ttft.labels(...v),
        itl: this.itl.labels(...v),
        interChunk: this.interChunk.labels(...v),
        tpot: this.tpot.labels(...v),
        tps: this.tps.labels(...v),
        input: this.inputTokens.labels(...v),
        maxGap: this.maxGap.labels(...v),
        stalls: this.stalls.labels(...v),
        tokensPerChunk: this.tokensPerChunk.labels(...v),
        headers: this.headers.labels(...v),
        ttfot: this.ttfot.labels(...v),
        estimateRatio: this.estimateRatio.labels(...v),
      }
      this.#bound.set(key, b)
    }
    return b
  }

  /** Records one finished request. TTFT and gaps whatever the outcome; TPOT and TPS only when ok. */
  record(r: RequestRecord): void {
    const { labels: l, timing: t } = r
    const b = this.#boundFor(l)
    this.inFlight.touch([l.provider, l.model, l.route])
    this.requests.labels(l.provider, l.model, l.route, r.outcome, String(r.statusCode)).inc()
    // Exemplars carry wall-clock time (OpenMetrics), read once per request and only when asked for.
    const exemplar = this.#options.exemplars && r.requestId !== undefined ? requestIdExemplar(r.requestId) : undefined
    const now = exemplar === undefined ? 0 : Date.now() / 1000
    const e2e = this.e2e.labels(l.provider, l.model, l.route, r.outcome)
    if (exemplar === undefined) e2e.observe(t.e2e)
    else e2e.observeWithExemplar(t.e2e, 1, exemplar, now)
    if (t.ttft !== undefined) {
      if (exemplar === undefined) b.ttft.observe(t.ttft)
      else b.ttft.observeWithExemplar(t.ttft, 1, exemplar, now)
    }
    if (t.ttfot !== undefined) b.ttfot.observe(t.ttfot)
    if (r.headersSeconds !== undefined) b.headers.observe(r.headersSeconds)
    if (t.chunks >= 1) {
      const perChunk = b.tokensPerChunk
      forEachChunkTokensRun(r.chunks, (k, times) => perChunk.observe(k, times))
    }
    if (t.chunks >= 2) {
      const itl = b.itl
      const gaps = b.interChunk
      forEachGapRun(r.chunks, (gap, k, times) => {
        gaps.observe(gap, times)
        if (k > 0) {
          if (exemplar === undefined) itl.observe(gap / k, k * times)
          else itl.observeWithExemplar(gap / k, k * times, exemplar, now)
        }
      })
      if (t.maxGap !== undefined) {
        if (exemplar === undefined) b.maxGap.observe(t.maxGap)
        else b.maxGap.observeWithExemplar(t.maxGap, 1, exemplar, now)
      }
      b.stalls.inc(countStalls(r.chunks, this.#options.stallSeconds))
    }
    if (r.slo !== undefined) {
      const itlP99 = r.slo.itl_p99_seconds === undefined ? undefined : requestItlP99(r.chunks)
      const verdict = judgeSlo(r.slo, { outcome: r.outcome, statusCode: r.statusCode, timing: t, itlP99 })
      b.slo ??= { met: this.slo.labels(l.provider, l.model, l.route, 'met'), missed: this.slo.labels(l.provider, l.model, l.route, 'missed') }
      if (verdict !== undefined) b.slo[verdict].inc()
    }
    if (r.estimateRatio !== undefined && Number.isFinite(r.estimateRatio)) b.estimateRatio.observe(r.estimateRatio)
    if (r.outcome === Outcome.ok) {
      if (t.tpot !== undefined) b.tpot.observe(t.tpot)
      if (t.tps !== undefined) b.tps.observe(t.tps)
    }
    if (r.outputTokens > 0 || r.outputSource === TokenSource.usage) {
      this.outputTokens.labels(l.provider, l.model, l.route, r.outputSource).inc(r.outputTokens)
    }
    if (r.inputTokens !== undefined && r.inputTokens > 0) b.input.inc(r.inputTokens)
  }

  parseError(l: Labels): void {
    this.parseErrors.labels(l.provider, l.model, l.route).inc()
  }

  usageInjected(l: Labels): void {
    this.usageInjections.labels(l.provider, l.model, l.route).inc()
  }
}
