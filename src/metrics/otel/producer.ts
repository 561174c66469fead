import type { Attributes, HrTime } from '@opentelemetry/api'
import { ValueType } from '@opentelemetry/api'
import { millisToHrTime } from '@opentelemetry/core'
import { emptyResource } from '@opentelemetry/resources'
import { AggregationTemporality, DataPointType } from '@opentelemetry/sdk-metrics'
import type {
  CollectionResult,
  DataPoint,
  ExponentialHistogram,
  Histogram,
  MetricData,
  MetricProducer,
} from '@opentelemetry/sdk-metrics'
import { HistogramCore } from '../../histogram/histogram-core.ts'

/**
 * The GenAI histograms kept in tokentap's histogram core and handed to the SDK's reader as a
 * MetricProducer (https://opentelemetry.io/docs/specs/otel/metrics/sdk/#metricproducer): the SDK's
 * instruments hash the attributes on every `record()` (cost in docs/performance.md).
 * The SDK's semantics are kept: inclusive upper bounds, dropped negative and non-finite values,
 * the reader's temporality, and the cardinality limit of the spec
 * (https://opentelemetry.io/docs/specs/otel/metrics/sdk/#cardinality-limits), applied for the
 * series' lifetime under cumulative temporality; `otel.histograms: exponential` exports the cores'
 * exponential buckets as ExponentialHistogram points with the SDK's defaults.
 */

/** The SDK's default maximum scale and size of a base-2 exponential histogram (our core stops at 8). */
const EXPONENTIAL_SCALE = 8
const EXPONENTIAL_MAX_SIZE = 160

/** One attribute set's aggregate in one histogram: its core, and when its period started. */
export class HistogramCell {
  readonly attributes: Attributes
  readonly core: HistogramCore
  readonly #integer: boolean
  readonly start: HrTime

  constructor(attributes: Attributes, core: HistogramCore, integer: boolean, start: HrTime) {
    this.attributes = attributes
    this.core = core
    this.#integer = integer
    this.start = start
  }

  /** Non-cumulative counts of the explicit buckets (the last one above every bound); empty for an exponential cell. */
  get counts(): Float64Array {
    return this.core.classic ?? NO_COUNTS
  }

  get count(): number {
    return this.core.count
  }

  get sum(): number {
    return this.core.sum
  }

  /** Records a value `times` times (a run of equal gaps), with the SDK's rules for what a histogram takes. */
  add(value: number, times = 1): void {
    // The SDK's histogram drops negative and non-finite values and truncates INT ones.
    if (!(value >= 0) || value === Infinity) return
    this.core.observe(this.#integer ? Math.trunc(value) : value, times)
  }
}

export interface HistogramOptions {
  readonly name: string
  readonly unit: string
  readonly description: string
  readonly bounds: readonly number[]
  /** ValueType.INT: values are truncated (as the SDK does), the descriptor says INT. */
  readonly valueType?: ValueType
  /** A monotonic counter: each cell is exported as its sum (a Sum point), its buckets unused. */
  readonly counter?: boolean
}

const NO_COUNTS = new Float64Array(0)
const OVERFLOW: Attributes = { 'otel.metric.overflow': true }
/** No attribute set's key: keys are values joined with U+0000, never starting with U+0001. */
const OVERFLOW_KEY = '\u0001overflow'

/** The cells of one histogram by attribute set, at most `limit` of them (the overflow one included). */
export class PreAggregatedHistogram {
  readonly options: HistogramOptions
  readonly #producer: PreAggregatedMetrics
  readonly #limit: number
  readonly #integer: boolean
  readonly #bounds: Float64Array
  readonly #cells = new Map<string, HistogramCell>()

  constructor(producer: PreAggregatedMetrics, options: HistogramOptions, limit: number) {
    this.options = options
    this.#producer = producer
    this.#limit = limit
    this.#integer = options.valueType === ValueType.INT
    this.#bounds = Float64Array.from(options.bounds)
  }

  #newCell(attributes: Attributes): HistogramCell {
    // OTel's exponential histograms have no zero threshold on the wire: only 0 itself is in the zero bucket.
    const core = this.#producer.exponential
      ? new HistogramCore({ schema: EXPONENTIAL_SCALE, maxBuckets: EXPONENTIAL_MAX_SIZE, zeroThreshold: 0 })
      : new HistogramCore({ bounds: this.#bounds })
    return new HistogramCell(attributes, core, this.#integer, this.#producer.periodStart)
  }

  /** The cell of an attribute set, or the overflow cell past the limit; valid while `producer.generation` is unchanged. */
  cell(key: string, attributes: Attributes): HistogramCell {
    let c = this.#cells.get(key)
    if (c === undefined) {
      if (this.#cells.size >= this.#limit - 1) return this.#overflow()
      c = this.#newCell(attributes)
      this.#cells.set(key, c)
    }
    return c
  }

  #overflow(): HistogramCell {
    let c = this.#cells.get(OVERFLOW_KEY)
    if (c === undefined) {
      c = this.#newCell(OVERFLOW)
      this.#cells.set(OVERFLOW_KEY, c)
    }
    return c
  }

  /** This histogram's points up to `now` (undefined with none), as the SDK's MetricData. */
  collect(now: HrTime, temporality: AggregationTemporality): MetricData | undefined {
    if (this.#cells.size === 0) return undefined
    const o = this.options
    const descriptor = {
      name: o.name,
      unit: o.unit,
      description: o.description,
      valueType: o.valueType ?? ValueType.DOUBLE,
    }
    if (o.counter === true) {
      const points: DataPoint<number>[] = []
      for (const c of this.#cells.values())
        points.push({ attributes: c.attributes, startTime: c.start, endTime: now, value: c.sum })
      return {
        descriptor,
        aggregationTemporality: temporality,
        dataPointType: DataPointType.SUM,
        isMonotonic: true,
        dataPoints: points,
      }
    }
    if (this.#producer.exponential) {
      const dataPoints: DataPoint<ExponentialHistogram>[] = []
      for (const c of this.#cells.values())
        dataPoints.push({ attributes: c.attributes, startTime: c.start, endTime: now, value: exponentialPoint(c.core) })
      return {
        descriptor,
        aggregationTemporality: temporality,
        dataPointType: DataPointType.EXPONENTIAL_HISTOGRAM,
        dataPoints,
      }
    }
    const dataPoints: DataPoint<Histogram>[] = []
    for (const c of this.#cells.values()) {
      const h = c.core
      const some = h.count > 0
      dataPoints.push({
        attributes: c.attributes,
        startTime: c.start,
        endTime: now,
        value: {
          buckets: { boundaries: [...o.bounds], counts: Array.from(c.counts) },
          sum: h.sum,
          count: h.count,
          min: some ? h.min : undefined,
          max: some ? h.max : undefined,
        },
      })
    }
    return { descriptor, aggregationTemporality: temporality, dataPointType: DataPointType.HISTOGRAM, dataPoints }
  }

  clear(): void {
    this.#cells.clear()
  }
}

/** A core's exponential buckets as an OTLP point: OTel's bucket `index` is the core's `index + 1`, the same bucket. */
function exponentialPoint(h: HistogramCore): ExponentialHistogram {
  const some = h.count > 0
  const range = h.range()
  const bucketCounts: number[] = []
  if (range !== undefined) for (let i = range.lo; i <= range.hi; i++) bucketCounts.push(h.bucket(i))
  return {
    count: h.count,
    sum: h.sum,
    scale: h.schema as number,
    zeroCount: h.zeroCount,
    positive: { offset: range === undefined ? 0 : range.lo - 1, bucketCounts },
    negative: { offset: 0, bucketCounts: [] },
    min: some ? h.min : undefined,
    max: some ? h.max : undefined,
  }
}

export interface PreAggregatedOptions {
  readonly scope: string
  /** Attribute sets per metric, the overflow one included (the SDK's default: 2000). */
  readonly limit: number
  /** The reader's temporality for histograms (the exporter's choice). */
  readonly temporality: () => AggregationTemporality
  /** Exponential (base-2) buckets instead of the explicit bounds (`otel.histograms: exponential`). */
  readonly exponential?: boolean
}

/** Pre-aggregated histograms of one scope, collected by the SDK's reader. */
export class PreAggregatedMetrics implements MetricProducer {
  readonly #options: PreAggregatedOptions
  readonly #histograms: PreAggregatedHistogram[] = []
  /** Start of new cells' points: creation (cumulative), else the last collection (delta). */
  periodStart: HrTime = millisToHrTime(Date.now())
  /** Changes when the cells are dropped (each delta collection): cells kept by callers are stale then. */
  generation = 0
  readonly exponential: boolean

  constructor(options: PreAggregatedOptions) {
    this.#options = options
    this.exponential = options.exponential === true
  }

  histogram(options: HistogramOptions): PreAggregatedHistogram {
    const h = new PreAggregatedHistogram(this, options, this.#options.limit)
    this.#histograms.push(h)
    return h
  }

  async collect(): Promise<CollectionResult> {
    const now = millisToHrTime(Date.now())
    const temporality =
      this.#options.temporality() === AggregationTemporality.DELTA
        ? AggregationTemporality.DELTA
        : AggregationTemporality.CUMULATIVE
    const metrics: MetricData[] = []
    for (const h of this.#histograms) {
      const m = h.collect(now, temporality)
      if (m !== undefined) metrics.push(m)
    }
    // Delta: every period starts empty, its limit too (as the SDK's delta storage does).
    if (temporality === AggregationTemporality.DELTA) {
      for (const h of this.#histograms) h.clear()
      this.periodStart = now
      this.generation++
    }
    const scopeMetrics = metrics.length === 0 ? [] : [{ scope: { name: this.#options.scope }, metrics }]
    // The reader keeps the SDK's resource and ignores this one.
    return { resourceMetrics: { resource: emptyResource(), scopeMetrics }, errors: [] }
  }
}
