import { forEachGap } from '../timing/request-timing.ts'
import { errorType, Outcome, TokenSource } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { Labels } from './llm-metrics.ts'

/**
 * OpenTelemetry GenAI metrics (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/),
 * kept as cumulative explicit-bucket histograms in memory. `record()` is the hot path: it only
 * adds to arrays. `toOtlp()` builds the OTLP/JSON `ExportMetricsServiceRequest` for the exporter.
 */

/** One attribute, as OTLP/JSON writes it. */
export interface OtlpKeyValue {
  readonly key: string
  readonly value: { readonly stringValue: string }
}

interface Point {
  readonly attributes: readonly OtlpKeyValue[]
  readonly counts: Float64Array
  sum: number
  count: number
  min: number
  max: number
}

/** Semconv bucket advice: latency in seconds, per-token/chunk latency, token counts. */
const DURATION_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
const PER_TOKEN_BOUNDS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5]
const TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]

/** Distinct attribute sets per instrument; later ones go to one overflow point, like the OTel SDKs' cardinality limit. */
export const MAX_POINTS = 2000
const OVERFLOW: readonly OtlpKeyValue[] = [{ key: 'otel.metric.overflow', value: { stringValue: 'true' } }]

export class OtelHistogram {
  readonly name: string
  readonly unit: string
  readonly description: string
  readonly bounds: readonly number[]
  readonly #points = new Map<string, Point>()

  constructor(name: string, unit: string, description: string, bounds: readonly number[]) {
    this.name = name
    this.unit = unit
    this.description = description
    this.bounds = bounds
  }

  get points(): IterableIterator<Point> {
    return this.#points.values()
  }

  #point(key: string, attributes: readonly OtlpKeyValue[]): Point {
    let p = this.#points.get(key)
    if (p === undefined) {
      if (this.#points.size >= MAX_POINTS) return this.#point('\u0001overflow', OVERFLOW)
      p = { attributes, counts: new Float64Array(this.bounds.length + 1), sum: 0, count: 0, min: Infinity, max: -Infinity }
      this.#points.set(key, p)
    }
    return p
  }

  /** Records `value` under an attribute set; `key` identifies the set (its values joined). */
  record(key: string, attributes: readonly OtlpKeyValue[], value: number): void {
    if (!Number.isFinite(value)) return
    const p = this.#point(key, attributes)
    const bounds = this.bounds
    // OTLP explicit buckets are (previous, bound]: the first bound ≥ value.
    let i = 0
    while (i < bounds.length && bounds[i] < value) i++
    p.counts[i]++
    p.sum += value
    p.count++
    if (value < p.min) p.min = value
    if (value > p.max) p.max = value
  }
}

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

const kv = (key: string, value: string): OtlpKeyValue => ({ key, value: { stringValue: value } })

export class OtelMetrics {
  readonly duration = new OtelHistogram('gen_ai.client.operation.duration', 's', 'GenAI operation duration.', DURATION_BOUNDS)
  readonly tokenUsage = new OtelHistogram('gen_ai.client.token.usage', '{token}', 'Number of input and output tokens used.', TOKEN_BOUNDS)
  readonly timeToFirstChunk = new OtelHistogram('gen_ai.client.operation.time_to_first_chunk', 's', 'Time to receive the first chunk in a streaming operation.', DURATION_BOUNDS)
  readonly timePerOutputChunk = new OtelHistogram('gen_ai.client.operation.time_per_output_chunk', 's', 'Time between consecutive chunks of a streaming operation.', PER_TOKEN_BOUNDS)
  readonly timeToFirstToken = new OtelHistogram('gen_ai.server.time_to_first_token', 's', 'Time to generate first token for successful responses.', DURATION_BOUNDS)
  readonly timePerOutputToken = new OtelHistogram('gen_ai.server.time_per_output_token', 's', 'Time per output token generated after the first token for successful responses.', PER_TOKEN_BOUNDS)

  all(): readonly OtelHistogram[] {
    return [this.duration, this.tokenUsage, this.timeToFirstChunk, this.timePerOutputChunk, this.timeToFirstToken, this.timePerOutputToken]
  }

  /** Maps one finished request's Measurement onto the GenAI histograms. */
  record(labels: Labels, m: Measurement, r: OtelRequest): void {
    const operation = operationFor(r.method, r.path)
    if (operation === undefined) return
    const provider = PROVIDER_NAMES[labels.provider] ?? labels.provider
    const base = [kv('gen_ai.operation.name', operation), kv('gen_ai.provider.name', provider), kv('gen_ai.request.model', labels.model)]
    if (r.responseModel !== undefined) base.push(kv('gen_ai.response.model', r.responseModel))
    const baseKey = `${operation}\u0000${provider}\u0000${labels.model}\u0000${r.responseModel ?? ''}`
    const error = errorType(m)
    const withError = error === undefined ? base : [...base, kv('error.type', error)]
    const t = m.timing
    this.duration.record(`${baseKey}\u0000${error ?? ''}`, withError, t.e2e)
    if (m.inputTokens !== undefined) this.tokenUsage.record(`${baseKey}\u0000input`, [...base, kv('gen_ai.token.type', 'input')], m.inputTokens)
    // A request with no reported total and no streamed content has no output count to report.
    if (m.outputSource === TokenSource.usage || t.chunks > 0) this.tokenUsage.record(`${baseKey}\u0000output`, [...base, kv('gen_ai.token.type', 'output')], m.outputTokens)
    if (t.ttft !== undefined) {
      const key = `${baseKey}\u0000${error ?? ''}`
      this.timeToFirstChunk.record(key, withError, t.ttft)
      const perChunk = this.timePerOutputChunk
      forEachGap(m.chunks, (gap) => perChunk.record(key, withError, gap))
      if (m.outcome === Outcome.ok) {
        this.timeToFirstToken.record(baseKey, base, t.ttft)
        if (t.tpot !== undefined) this.timePerOutputToken.record(baseKey, base, t.tpot)
      }
    }
  }

  /**
   * The OTLP/JSON ExportMetricsServiceRequest of every point so far (cumulative since `startNs`),
   * or undefined when nothing was recorded. 64-bit integers are decimal strings, as OTLP/JSON wants.
   */
  toOtlp(resource: readonly OtlpKeyValue[], startNs: bigint, nowNs: bigint, scopeVersion: string): object | undefined {
    const metrics: object[] = []
    const start = startNs.toString()
    const now = nowNs.toString()
    for (const h of this.all()) {
      const dataPoints: object[] = []
      for (const p of h.points) {
        dataPoints.push({
          attributes: p.attributes,
          startTimeUnixNano: start,
          timeUnixNano: now,
          count: String(p.count),
          sum: p.sum,
          bucketCounts: Array.from(p.counts, String),
          explicitBounds: h.bounds,
          min: p.min,
          max: p.max,
        })
      }
      if (dataPoints.length === 0) continue
      // aggregationTemporality 2 = AGGREGATION_TEMPORALITY_CUMULATIVE.
      metrics.push({ name: h.name, description: h.description, unit: h.unit, histogram: { aggregationTemporality: 2, dataPoints } })
    }
    if (metrics.length === 0) return undefined
    return { resourceMetrics: [{ resource: { attributes: resource }, scopeMetrics: [{ scope: scopeVersion === '' ? { name: 'tokentap' } : { name: 'tokentap', version: scopeVersion }, metrics }] }] }
  }
}
