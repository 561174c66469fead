import { hostname } from 'node:os'
import { ValueType } from '@opentelemetry/api'
import type { Attributes, Histogram } from '@opentelemetry/api'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import { AggregationTemporality, InstrumentType, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics'
import type { PushMetricExporter } from '@opentelemetry/sdk-metrics'
import type { Logger } from 'pino'
import type { OtelConfig } from '../config/schema.ts'
import { forEachGap } from '../timing/request-timing.ts'
import { errorType, Outcome, TokenSource } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { Labels } from './llm-metrics.ts'
import { otelProtocol } from './otel-config.ts'
import type { Env } from './otel-config.ts'
import { createOtlpExporter, LoggedExporter } from './otel-export.ts'
import { PreAggregatedHistogram } from './otel-gaps.ts'

/**
 * OpenTelemetry GenAI metrics (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/)
 * through the OpenTelemetry metrics SDK: histograms of one MeterProvider of tokentap's own (not
 * the global one, so an embedding app's OTel setup is left alone), a periodic reader and the
 * OTLP exporter of otel-export.ts. `record()` only maps a finished request's Measurement.
 */

/** Semconv bucket advice: latency in seconds, per-token/chunk latency, token counts. */
export const DURATION_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
export const PER_TOKEN_BOUNDS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5]
export const TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]

/** Who a finished request was, besides its Measurement. */
export interface OtelRequest {
  readonly method: string
  /** Path after the route prefix, without the query. */
  readonly path: string
  /** The response's model (already bounded like the model label). */
  readonly responseModel: string | undefined
}

/**
 * `gen_ai.operation.name` from the API path, or undefined for requests that are no GenAI
 * operation (model lists, health checks): those are not recorded.
 */
export function operationFor(method: string, path: string): string | undefined {
  if (method !== 'POST') return undefined
  if (/embed/i.test(path)) return 'embeddings'
  if (/generatecontent/i.test(path)) return 'generate_content'
  if (/chat|messages|responses|converse|invoke/i.test(path)) return 'chat'
  if (/complet|generate/i.test(path)) return 'text_completion'
  return undefined
}

/** tokentap's provider names → `gen_ai.provider.name` well-known values. */
const PROVIDER_NAMES: Readonly<Record<string, string>> = {
  gemini: 'gcp.gemini',
  vertex: 'gcp.vertex_ai',
  bedrock: 'aws.bedrock',
  azure: 'azure.ai.openai',
}

/** What `OtelMetrics` is built from. */
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

interface AttributeSets {
  /** The set's identity (its values joined). */
  readonly key: string
  readonly base: Attributes
  readonly withError: Attributes
  readonly input: Attributes
  readonly output: Attributes
}

const ATTRIBUTE_CACHE = 4096

const positive = (v: string | undefined): number | undefined => {
  const n = v === undefined || v.trim() === '' ? NaN : Number(v)
  return Number.isFinite(n) && n > 0 ? n : undefined
}

/** The six GenAI histograms, their MeterProvider, reader and exporter; `flush()`/`shutdown()` export now. */
export class OtelMetrics {
  readonly #provider: MeterProvider
  readonly #logger: Logger
  readonly #duration: Histogram
  readonly #tokenUsage: Histogram
  readonly #timeToFirstChunk: Histogram
  /** time_per_output_chunk: once per gap, so aggregated before the SDK (otel-gaps.ts). */
  readonly #timePerOutputChunk: PreAggregatedHistogram
  readonly #timeToFirstToken: Histogram
  readonly #timePerOutputToken: Histogram
  readonly #attributeSets = new Map<string, AttributeSets>()

  constructor(options: OtelOptions) {
    const { config, logger } = options
    const env = options.env ?? process.env
    this.#logger = logger
    const protocol = otelProtocol(config, env, logger)
    const exporter = new LoggedExporter(options.exporter ?? createOtlpExporter(config, protocol), logger, protocol)
    // OTEL_METRIC_EXPORT_INTERVAL/TIMEOUT are the SDK spec's reader variables; the JS reader leaves them to its caller.
    const interval = config.interval_ms ?? positive(env.OTEL_METRIC_EXPORT_INTERVAL) ?? 60_000
    this.#timePerOutputChunk = new PreAggregatedHistogram({
      name: 'gen_ai.client.operation.time_per_output_chunk',
      unit: 's',
      description: 'Time between consecutive chunks of a streaming operation.',
      bounds: PER_TOKEN_BOUNDS,
      limit: options.cardinalityLimit ?? 2000,
      temporality: () => exporter.selectAggregationTemporality?.(InstrumentType.HISTOGRAM) ?? AggregationTemporality.CUMULATIVE,
      scope: 'tokentap',
    })
    const reader = new PeriodicExportingMetricReader({
      exporter,
      metricProducers: [this.#timePerOutputChunk],
      exportIntervalMillis: interval,
      exportTimeoutMillis: Math.min(interval, positive(env.OTEL_METRIC_EXPORT_TIMEOUT) ?? 30_000),
      cardinalityLimits: options.cardinalityLimit === undefined ? undefined : { default: options.cardinalityLimit },
    })
    // Later resources win: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over tokentap's defaults
    // over the SDK's (telemetry.sdk.*).
    const resource = defaultResource()
      .merge(resourceFromAttributes({ 'service.name': 'tokentap', 'service.instance.id': `${hostname()}:${process.pid}` }))
      .merge(detectResources({ detectors: [envDetector] }))
    this.#provider = new MeterProvider({ resource, readers: [reader] })
    const meter = this.#provider.getMeter('tokentap')
    const histogram = (name: string, unit: string, description: string, bounds: number[], valueType = ValueType.DOUBLE): Histogram =>
      meter.createHistogram(name, { unit, description, valueType, advice: { explicitBucketBoundaries: bounds } })
    this.#duration = histogram('gen_ai.client.operation.duration', 's', 'GenAI operation duration.', DURATION_BOUNDS)
    this.#tokenUsage = histogram('gen_ai.client.token.usage', '{token}', 'Number of input and output tokens used.', TOKEN_BOUNDS, ValueType.INT)
    this.#timeToFirstChunk = histogram('gen_ai.client.operation.time_to_first_chunk', 's', 'Time to receive the first chunk in a streaming operation.', DURATION_BOUNDS)
    this.#timeToFirstToken = histogram('gen_ai.server.time_to_first_token', 's', 'Time to generate first token for successful responses.', DURATION_BOUNDS)
    this.#timePerOutputToken = histogram('gen_ai.server.time_per_output_token', 's', 'Time per output token generated after the first token for successful responses.', PER_TOKEN_BOUNDS)
  }

  /** Maps one finished request's Measurement onto the GenAI histograms. */
  record(labels: Labels, m: Measurement, r: OtelRequest): void {
    const operation = operationFor(r.method, r.path)
    if (operation === undefined) return
    const error = errorType(m)
    const a = this.#attributes(operation, labels, r.responseModel, error)
    const t = m.timing
    this.#duration.record(t.e2e, a.withError)
    if (m.inputTokens !== undefined) this.#tokenUsage.record(m.inputTokens, a.input)
    // A request with no reported total and no streamed content has no output count to report.
    if (m.outputSource === TokenSource.usage || t.chunks > 0) this.#tokenUsage.record(m.outputTokens, a.output)
    if (t.ttft !== undefined) {
      this.#timeToFirstChunk.record(t.ttft, a.withError)
      if (m.chunks.count >= 2) {
        const cell = this.#timePerOutputChunk.cell(a.key, a.withError)
        forEachGap(m.chunks, (gap) => cell.add(gap))
      }
      if (m.outcome === Outcome.ok) {
        this.#timeToFirstToken.record(t.ttft, a.base)
        if (t.tpot !== undefined) this.#timePerOutputToken.record(t.tpot, a.base)
      }
    }
  }

  /**
   * The attribute objects of one request's series, built once per distinct set: the SDK hashes
   * the attributes on every call anyway, but building them (spreads) cost as much again.
   */
  #attributes(operation: string, labels: Labels, responseModel: string | undefined, error: string | undefined): AttributeSets {
    const key = `${operation}\u0000${labels.provider}\u0000${labels.model}\u0000${responseModel ?? ''}\u0000${error ?? ''}`
    let a = this.#attributeSets.get(key)
    if (a === undefined) {
      const base: Attributes = {
        'gen_ai.operation.name': operation,
        'gen_ai.provider.name': PROVIDER_NAMES[labels.provider] ?? labels.provider,
        'gen_ai.request.model': labels.model,
      }
      if (responseModel !== undefined) base['gen_ai.response.model'] = responseModel
      a = {
        key,
        base,
        withError: error === undefined ? base : { ...base, 'error.type': error },
        input: { ...base, 'gen_ai.token.type': 'input' },
        output: { ...base, 'gen_ai.token.type': 'output' },
      }
      // A cache, not the series: past its bound it starts over (the SDK's limit bounds the series).
      if (this.#attributeSets.size >= ATTRIBUTE_CACHE) this.#attributeSets.clear()
      this.#attributeSets.set(key, a)
    }
    return a
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
