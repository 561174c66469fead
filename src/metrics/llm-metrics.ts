import { Counter } from './counter.ts'
import type { CounterSeries } from './counter.ts'
import { CollectedGauge } from './gauge.ts'
import { Histogram } from './histogram.ts'
import type { HistogramSeries } from './histogram.ts'
import { forEachGap } from '../timing/request-timing.ts'
import type { Timing } from '../timing/request-timing.ts'
import type { ChunkLog } from '../timing/chunk-log.ts'
import type { Config } from '../config/schema.ts'

/**
 * The llm_ metrics: definitions, and `record()` of one finished request. Knows nothing of HTTP:
 * it gets labels, an outcome, a status, the chunk log and its timing.
 * Definitions: ../../README.md#metrics.
 */

export const Outcome = { ok: 'ok', error: 'error', cancelled: 'cancelled' } as const
export type Outcome = (typeof Outcome)[keyof typeof Outcome]

export const TokenSource = { usage: 'usage', estimate: 'estimate' } as const
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
}

const BASE = ['provider', 'model', 'route'] as const

/** One label set's bound children, so a request looks its series up once. */
interface Bound {
  readonly ttft: HistogramSeries
  readonly itl: HistogramSeries
  readonly interChunk: HistogramSeries
  readonly tpot: HistogramSeries
  readonly tps: HistogramSeries
  readonly input: CounterSeries
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
  readonly #bound = new Map<string, Bound>()

  constructor(buckets: Config['metrics']['buckets'], inFlight: (add: (labels: readonly string[], value: number) => void) => void) {
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
      help: 'Output tokens: the provider-reported count (source="usage") when given, else the streamed tokens counted by the tokenizer (source="estimate").',
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
      labelNames: ['provider', 'route'],
    })
    this.usageInjections = new Counter({
      name: 'llm_usage_injections_total',
      help: 'Streaming requests sent upstream with stream_options.include_usage added by the route\'s inject_usage (the added usage chunk is not passed to the client).',
      labelNames: ['provider', 'route'],
    })
    this.inFlight = new CollectedGauge({
      name: 'llm_requests_in_flight',
      help: 'Requests whose response has not ended.',
      labelNames,
      collect: inFlight,
    })
  }

  /** Every metric, in scrape order. */
  all(): readonly (Histogram | Counter | CollectedGauge)[] {
    return [this.ttft, this.itl, this.interChunk, this.tpot, this.e2e, this.tps, this.outputTokens, this.inputTokens, this.requests, this.parseErrors, this.usageInjections, this.inFlight]
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
    this.e2e.labels(l.provider, l.model, l.route, r.outcome).observe(t.e2e)
    if (t.ttft !== undefined) b.ttft.observe(t.ttft)
    if (t.chunks >= 2) {
      const itl = b.itl
      const gaps = b.interChunk
      forEachGap(r.chunks, (gap, k) => {
        gaps.observe(gap)
        if (k > 0) itl.observe(gap / k, k)
      })
    }
    if (r.outcome === Outcome.ok) {
      if (t.tpot !== undefined) b.tpot.observe(t.tpot)
      if (t.tps !== undefined) b.tps.observe(t.tps)
    }
    if (r.outputTokens > 0 || r.outputSource === TokenSource.usage) {
      this.outputTokens.labels(l.provider, l.model, l.route, r.outputSource).inc(r.outputTokens)
    }
    if (r.inputTokens !== undefined && r.inputTokens > 0) b.input.inc(r.inputTokens)
  }

  parseError(provider: string, route: string): void {
    this.parseErrors.labels(provider, route).inc()
  }

  usageInjected(provider: string, route: string): void {
    this.usageInjections.labels(provider, route).inc()
  }
}
