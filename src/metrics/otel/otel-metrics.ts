import { ValueType } from '@opentelemetry/api'
import type { Attributes } from '@opentelemetry/api'
import {
  AggregationTemporality,
  InstrumentType,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import type { PushMetricExporter } from '@opentelemetry/sdk-metrics'
import type { Logger } from 'pino'
import type { OtelConfig } from '../../config/schema.ts'
import type { Observations, SeriesLabels } from '../../record/observations.ts'
import { genAiProvider, otelHistograms, otelProtocol } from './config.ts'
import type { Env } from './config.ts'
import { createOtlpExporter, LoggedExporter } from './export.ts'
import { PreAggregatedMetrics } from './producer.ts'
import { tokentapResource } from './resource.ts'
import type { HistogramCell, PreAggregatedHistogram } from './producer.ts'

/**
 * OpenTelemetry GenAI metrics (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/)
 * through a MeterProvider of tokentap's own, so an embedding app's global OTel setup is left
 * alone; what is recorded is decided by record/observations.ts, this only maps it.
 */

/** Semconv bucket advice: latency in seconds, per-token/chunk latency, token counts. */
export const DURATION_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
/** Semconv bucket advice of `gen_ai.server.time_per_output_token`. */
export const PER_TOKEN_BOUNDS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5]
export const TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]

export interface OtelOptions {
  readonly config: OtelConfig
  readonly logger: Logger
  /** Replaces the OTLP exporter (tests, benchmarks). */
  readonly exporter?: PushMetricExporter
  /** Attribute sets per metric, the `otel.metric.overflow` one included (the SDK's default: 2000). */
  readonly cardinalityLimit?: number
  /** Where the `OTEL_*` variables are read (default `process.env`). */
  readonly env?: Env
}

/** The six GenAI histograms, and the inference usage counters (input, output and their parts). */
interface GenAiHistograms {
  readonly inputUsage: PreAggregatedHistogram
  readonly outputUsage: PreAggregatedHistogram
  readonly cacheRead: PreAggregatedHistogram
  readonly cacheWrite: PreAggregatedHistogram
  readonly reasoning: PreAggregatedHistogram
  readonly duration: PreAggregatedHistogram
  readonly tokenUsage: PreAggregatedHistogram
  readonly timeToFirstChunk: PreAggregatedHistogram
  readonly timePerOutputChunk: PreAggregatedHistogram
  readonly timeToFirstToken: PreAggregatedHistogram
  readonly timePerOutputToken: PreAggregatedHistogram
  /** tokentap's own (the GenAI conventions name no cost): llm_cost_total and llm_unpriced_tokens_total. */
  readonly cost: PreAggregatedHistogram
  readonly unpriced: PreAggregatedHistogram
}

/**
 * One attribute set of a request: its attribute objects, built once, and its cell in each
 * histogram, bound on first use (the cardinality limit counts a set when first recorded, as the SDK's does).
 */
class Series {
  /** The set's identity (its values joined), error type included. */
  readonly #key: string
  /** The same without the error type: the sets of the metrics that have none. */
  readonly #baseKey: string
  readonly #base: Attributes
  readonly #withError: Attributes
  readonly #input: Attributes
  readonly #output: Attributes
  readonly #inputKey: string
  readonly #outputKey: string
  /** The usage counters' set: `gen_ai.token.modality` is required, and no provider here breaks these counts down by it. */
  readonly #usage: Attributes
  readonly #usageKey: string
  readonly #h: GenAiHistograms
  readonly #cells: (HistogramCell | undefined)[] = new Array(12).fill(undefined)
  readonly #costCells = new Map<string, HistogramCell>()
  /** `PreAggregatedMetrics.generation` the cells were bound in. */
  generation: number

  constructor(
    h: GenAiHistograms,
    key: string,
    baseKey: string,
    base: Attributes,
    error: string | undefined,
    generation: number,
  ) {
    this.#h = h
    this.#key = key
    this.#baseKey = baseKey
    this.#base = base
    this.#withError = error === undefined ? base : { ...base, 'error.type': error }
    this.#input = { ...base, 'gen_ai.token.type': 'input' }
    this.#output = { ...base, 'gen_ai.token.type': 'output' }
    this.#inputKey = `${baseKey}\u0000input`
    this.#outputKey = `${baseKey}\u0000output`
    this.#usage = { ...base, 'gen_ai.token.modality': 'unknown' }
    this.#usageKey = `${baseKey}\u0000usage`
    this.generation = generation
  }

  duration(): HistogramCell {
    return this.#bind(0, this.#h.duration, this.#key, this.#withError)
  }
  inputTokens(): HistogramCell {
    return this.#bind(1, this.#h.tokenUsage, this.#inputKey, this.#input)
  }
  outputTokens(): HistogramCell {
    return this.#bind(2, this.#h.tokenUsage, this.#outputKey, this.#output)
  }
  // The chunk metrics have no `error.type` in the semantic conventions (their attribute tables).
  timeToFirstChunk(): HistogramCell {
    return this.#bind(3, this.#h.timeToFirstChunk, this.#baseKey, this.#base)
  }
  timePerOutputChunk(): HistogramCell {
    return this.#bind(4, this.#h.timePerOutputChunk, this.#baseKey, this.#base)
  }
  cacheRead(): HistogramCell {
    return this.#bind(7, this.#h.cacheRead, this.#usageKey, this.#usage)
  }
  cacheWrite(): HistogramCell {
    return this.#bind(8, this.#h.cacheWrite, this.#usageKey, this.#usage)
  }
  reasoning(): HistogramCell {
    return this.#bind(9, this.#h.reasoning, this.#usageKey, this.#usage)
  }
  inputUsage(): HistogramCell {
    return this.#bind(10, this.#h.inputUsage, this.#usageKey, this.#usage)
  }
  outputUsage(): HistogramCell {
    return this.#bind(11, this.#h.outputUsage, this.#usageKey, this.#usage)
  }
  timeToFirstToken(): HistogramCell {
    return this.#bind(5, this.#h.timeToFirstToken, this.#baseKey, this.#base)
  }
  timePerOutputToken(): HistogramCell {
    return this.#bind(6, this.#h.timePerOutputToken, this.#baseKey, this.#base)
  }

  /** The cost counter's cell of a token kind (`tokentap.cost.kind`, `tokentap.cost.currency`), or the unpriced tokens' one. */
  cost(kind: string, currency: string | undefined): HistogramCell {
    const key = `${this.#baseKey}\u0000${kind}\u0000${currency ?? ''}`
    let cell = this.#costCells.get(key)
    if (cell === undefined) {
      const attributes: Attributes = { ...this.#base, 'tokentap.cost.kind': kind }
      if (currency !== undefined) attributes['tokentap.cost.currency'] = currency
      cell = (currency === undefined ? this.#h.unpriced : this.#h.cost).cell(key, attributes)
      this.#costCells.set(key, cell)
    }
    return cell
  }

  /** Forgets the bound cells (a delta collection dropped them). */
  unbind(generation: number): void {
    this.generation = generation
    this.#cells.fill(undefined)
    this.#costCells.clear()
  }

  #bind(slot: number, histogram: PreAggregatedHistogram, key: string, attributes: Attributes): HistogramCell {
    const bound = this.#cells[slot]
    if (bound !== undefined) return bound
    const cell = histogram.cell(key, attributes)
    this.#cells[slot] = cell
    return cell
  }
}

/** Series kept for reuse; past this many the cache starts over (the histograms' limits bound the series). */
const SERIES_CACHE = 4096

const positive = (v: string | undefined): number | undefined => {
  const n = v === undefined || v.trim() === '' ? NaN : Number(v)
  return Number.isFinite(n) && n > 0 ? n : undefined
}

/** The six GenAI histograms, their MeterProvider, reader and exporter; `flush()`/`shutdown()` export now. */
export class OtelMetrics {
  readonly #provider: MeterProvider
  readonly #logger: Logger
  /** The histograms, aggregated before the SDK (producer.ts) and collected by its reader. */
  readonly #producer: PreAggregatedMetrics
  readonly #h: GenAiHistograms
  readonly #series = new Map<string, Series>()

  constructor(options: OtelOptions) {
    const { config, logger } = options
    const env = options.env ?? process.env
    this.#logger = logger
    const protocol = otelProtocol(config, env, logger)
    const exporter = new LoggedExporter(options.exporter ?? createOtlpExporter(config, protocol), logger, protocol)
    // OTEL_METRIC_EXPORT_INTERVAL/TIMEOUT are the SDK spec's reader variables; the JS reader leaves them to its caller.
    const interval = config.interval_ms ?? positive(env.OTEL_METRIC_EXPORT_INTERVAL) ?? 60_000
    this.#producer = new PreAggregatedMetrics({
      scope: 'tokentap',
      limit: options.cardinalityLimit ?? 2000,
      temporality: () =>
        exporter.selectAggregationTemporality?.(InstrumentType.HISTOGRAM) ?? AggregationTemporality.CUMULATIVE,
      exponential: otelHistograms(config, env) === 'exponential',
    })
    const reader = new PeriodicExportingMetricReader({
      exporter,
      metricProducers: [this.#producer],
      exportIntervalMillis: interval,
      exportTimeoutMillis: Math.min(interval, positive(env.OTEL_METRIC_EXPORT_TIMEOUT) ?? 30_000),
    })
    this.#provider = new MeterProvider({ resource: tokentapResource(), readers: [reader] })
    const histogram = (
      name: string,
      unit: string,
      description: string,
      bounds: number[],
      valueType = ValueType.DOUBLE,
    ): PreAggregatedHistogram => this.#producer.histogram({ name, unit, description, bounds, valueType })
    const counter = (name: string, description: string): PreAggregatedHistogram =>
      this.#producer.histogram({
        name,
        unit: '{token}',
        description,
        bounds: [],
        valueType: ValueType.INT,
        counter: true,
      })
    this.#h = {
      duration: histogram('gen_ai.client.operation.duration', 's', 'GenAI operation duration.', DURATION_BOUNDS),
      tokenUsage: histogram(
        'gen_ai.client.token.usage',
        '{token}',
        'Number of input and output tokens used.',
        TOKEN_BOUNDS,
        ValueType.INT,
      ),
      timeToFirstChunk: histogram(
        'gen_ai.client.operation.time_to_first_chunk',
        's',
        'Time to receive the first chunk in a streaming operation.',
        DURATION_BOUNDS,
      ),
      timePerOutputChunk: histogram(
        'gen_ai.client.operation.time_per_output_chunk',
        's',
        'Time between consecutive chunks of a streaming operation.',
        DURATION_BOUNDS,
      ),
      timeToFirstToken: histogram(
        'gen_ai.server.time_to_first_token',
        's',
        'Time to generate first token for successful responses.',
        DURATION_BOUNDS,
      ),
      timePerOutputToken: histogram(
        'gen_ai.server.time_per_output_token',
        's',
        'Time per output token generated after the first token for successful responses.',
        PER_TOKEN_BOUNDS,
      ),
      inputUsage: counter(
        'gen_ai.client.inference.usage.input_tokens',
        'The number of input (prompt) tokens used, including cached tokens.',
      ),
      outputUsage: counter(
        'gen_ai.client.inference.usage.output_tokens',
        'The number of output (completion) tokens used, including reasoning tokens.',
      ),
      cacheRead: counter(
        'gen_ai.client.inference.usage.cache_read.input_tokens',
        'The number of input tokens read from the provider cache.',
      ),
      cacheWrite: counter(
        'gen_ai.client.inference.usage.cache_write.input_tokens',
        'The number of input tokens written to the provider cache.',
      ),
      reasoning: counter(
        'gen_ai.client.inference.usage.reasoning.output_tokens',
        'The number of reasoning output tokens used.',
      ),
      // No semantic convention names a cost yet: tokentap's own namespace (docs/cost.md).
      cost: this.#producer.histogram({
        name: 'tokentap.gen_ai.client.cost',
        unit: '{currency}',
        description: 'Cost of the tokens by kind, in the currency of tokentap.cost.currency.',
        bounds: [],
        valueType: ValueType.DOUBLE,
        counter: true,
      }),
      unpriced: counter('tokentap.gen_ai.client.unpriced_tokens', 'Tokens by kind that could not be priced.'),
    }
  }

  /** Maps one finished request's Observations onto the GenAI histograms: one series lookup, then a bucket search per value. */
  record(o: Observations): void {
    if (o.operation === undefined) return
    const s = this.#seriesOf(o.operation, o.labels, o.responseModel, o.errorType)
    s.duration().add(o.e2e)
    if (o.inputTokens !== undefined) s.inputTokens().add(o.inputTokens)
    if (o.outputTokens !== undefined) s.outputTokens().add(o.outputTokens)
    if (o.ttft !== undefined) s.timeToFirstChunk().add(o.ttft)
    const gaps = o.gaps
    for (let r = 0; r < gaps.count; r++) s.timePerOutputChunk().add(gaps.seconds[r], gaps.times[r])
    if (o.okTtft !== undefined) s.timeToFirstToken().add(o.okTtft)
    if (o.tpot !== undefined) s.timePerOutputToken().add(o.tpot)
    // Every operation, 0 when nothing was reported (the conventions' rule for these counters).
    s.inputUsage().add(o.inputTokens ?? 0)
    s.outputUsage().add(o.outputTokens ?? 0)
    if (o.cacheReadTokens !== undefined) s.cacheRead().add(o.cacheReadTokens)
    if (o.cacheWriteTokens !== undefined) s.cacheWrite().add(o.cacheWriteTokens)
    if (o.reasoningTokens !== undefined) s.reasoning().add(o.reasoningTokens)
    if (o.cost !== undefined) {
      for (const k of o.cost.kinds) {
        if (k.tokens > k.unpriced) s.cost(k.kind, o.cost.currency).add(k.cost)
        if (k.unpriced > 0) s.cost(k.kind, undefined).add(k.unpriced)
      }
    }
  }

  /** The series of one request's attribute set, its cells still valid (a delta collection drops them). */
  #seriesOf(
    operation: string,
    labels: SeriesLabels,
    responseModel: string | undefined,
    error: string | undefined,
  ): Series {
    const baseKey = `${operation}\u0000${labels.provider}\u0000${labels.model}\u0000${responseModel ?? ''}\u0000${labels.tenant ?? ''}`
    const key = error === undefined ? baseKey : `${baseKey}\u0000${error}`
    const generation = this.#producer.generation
    let s = this.#series.get(key)
    if (s === undefined) {
      const base: Attributes = {
        'gen_ai.operation.name': operation,
        'gen_ai.provider.name': genAiProvider(labels.provider),
        'gen_ai.request.model': labels.model,
      }
      if (responseModel !== undefined) base['gen_ai.response.model'] = responseModel
      // No semantic convention names a tenant: tokentap's own namespace, as the conventions ask of custom attributes.
      if (labels.tenant !== undefined) base['tokentap.tenant'] = labels.tenant
      s = new Series(this.#h, key, baseKey, base, error, generation)
      // A cache, not the series: past its bound it starts over, and the cells stay in the histograms.
      if (this.#series.size >= SERIES_CACHE) this.#series.clear()
      this.#series.set(key, s)
    } else if (s.generation !== generation) s.unbind(generation)
    return s
  }

  /** Collects and exports now (waits for an export already running). Never throws. */
  async flush(): Promise<void> {
    await this.#provider.forceFlush().catch((err: unknown) => this.#logger.debug({ err }, 'OTLP flush failed'))
  }

  /** Stops the interval and sends a last export. Never throws. */
  async shutdown(): Promise<void> {
    await this.#provider.shutdown().catch((err: unknown) => this.#logger.debug({ err }, 'OTLP shutdown failed'))
  }
}
