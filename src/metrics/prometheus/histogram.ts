import { MAX_NUMBER_BYTES, writer } from './byte-writer.ts'
import { escapeLabelValue, formatValue, header, renderLabels } from './format.ts'
import { HistogramCore } from '../../histogram/histogram-core.ts'
import { Metric } from './metric.ts'
import { MetricTypeCode, familyChunks, histogramMetric } from './protobuf.ts'
import type { ChangeLog, MetricOptions, SampleJson } from './metric.ts'
import type { TraceIds } from '../../record/trace-context.ts'

/**
 * A Prometheus histogram family with label children bound once and weighted observations: `observe(v, k)` counts k
 * observations of v in one step; each series keeps classic buckets and, with `native`, a native histogram's.
 */

/** A native histogram's settings (`metrics.native_histograms`). */
export interface NativeOptions {
  readonly schema: number
  readonly zeroThreshold: number
  readonly maxBuckets: number
}

/** The native histograms' settings from `metrics.native_histograms`, or undefined when they are off. */
export function nativeOptions(config: {
  readonly enabled: boolean
  readonly schema: number
  readonly zero_threshold: number
  readonly bucket_limit: number
}): NativeOptions | undefined {
  return config.enabled
    ? { schema: config.schema, zeroThreshold: config.zero_threshold, maxBuckets: config.bucket_limit }
    : undefined
}

export interface HistogramOptions extends MetricOptions {
  readonly buckets: readonly number[]
  readonly native?: NativeOptions
}

/** The latest observation of one bucket, for OpenMetrics exemplars. */
export interface Exemplar {
  /** Rendered label set, without braces: `request_id="…"`. */
  readonly labels: string
  readonly value: number
  /** Wall-clock seconds since the epoch. */
  readonly timestamp: number
}

/** OpenMetrics caps an exemplar's label set (names and values) at 128 UTF-8 characters. */
const MAX_EXEMPLAR_CHARS = 128
const TRACE_CHARS = 'trace_id'.length + 32 + 'span_id'.length + 16

/** `request_id="…"` (and the span's `trace_id`, `span_id`, so Grafana links the trace), escaped and cut to the OpenMetrics limit. */
export function requestIdExemplar(id: string, trace?: TraceIds): string {
  const room = MAX_EXEMPLAR_CHARS - 'request_id'.length - (trace === undefined ? 0 : TRACE_CHARS)
  // A string has no more code points than UTF-16 units: most ids fit without being split into characters.
  const value = id.length <= room ? id : [...id].slice(0, room).join('')
  const labels = `request_id="${escapeLabelValue(value)}"`
  return trace === undefined ? labels : `${labels},trace_id="${trace.traceId}",span_id="${trace.spanId}"`
}

/** `name_bucket{labels,le="`, `name_sum{labels} `, `name_count{labels} `. */
interface LineBytes {
  readonly bucket: Buffer
  readonly sum: Buffer
  readonly count: Buffer
}

/**
 * Figures of observations a series keeps for its next report: two observations, what a request adds to most series
 * (beyond them the state is sent, which the primary merges for less than many observations one by one).
 */
const SINCE_MAX = 4

export class HistogramSeries {
  readonly labelValues: readonly string[]
  /** Rendered `a="x",b="y"` of this series' labels. */
  readonly rendered: string
  /** The series' figures: classic counts, sum, count and (with `native`) exponential buckets. */
  readonly core: HistogramCore
  /** Non-cumulative counts per classic bucket; the last slot is +Inf. */
  readonly counts: Float64Array
  /** Latest exemplar per bucket (same slots as `counts`), allocated on the first one. */
  exemplars: (Exemplar | undefined)[] | undefined
  /** Cached exposition lines until the next observation (undefined: render again); a view of `store`, rewritten in place. */
  exposition: Buffer | undefined
  /** The OpenMetrics lines with exemplars (only when the series has any), cached like `exposition`. */
  expositionWithExemplars: Buffer | undefined
  /** Where the lines are rendered, reused while they fit. */
  store: Buffer | undefined
  storeWithExemplars: Buffer | undefined
  /** The fixed parts of this series' lines as UTF-8, made at its first render. */
  lineBytes: LineBytes | undefined
  /** This series' protobuf Metric field (classic and native buckets, exemplars), cached like `exposition`. */
  protobuf: Buffer | undefined
  /** Listed as changed in its family's ChangeLog since the tracking reader last took it (or no one tracks). */
  listed = true
  /** Its number in the tracking reader's reports (metric.ts, `Tracked`). */
  reportId = -1
  /**
   * Set by the tracking reader once it has sent this series' state: the observations since are kept (`since`, value and
   * weight pairs, at most SINCE_MAX figures) for its next report to send instead of the state (cluster/metrics.ts). Off
   * in a process no one reads, which keeps nothing.
   */
  logging = false
  since: number[] | undefined
  /** The schema when `since` began: a series whose schema was lowered meanwhile sends its state. */
  sinceSchema: number | undefined
  readonly #changes: ChangeLog<HistogramSeries> | undefined

  constructor(
    core: HistogramCore,
    labelValues: readonly string[],
    rendered: string,
    changes?: ChangeLog<HistogramSeries>,
  ) {
    this.core = core
    this.counts = core.classic as Float64Array
    this.labelValues = labelValues
    this.rendered = rendered
    this.#changes = changes
  }

  get sum(): number {
    return this.core.sum
  }

  get count(): number {
    return this.core.count
  }

  /** Records `weight` observations of `value`; returns the bucket slot, or -1 when nothing was recorded. */
  observe(value: number, weight = 1): number {
    const slot = this.core.observe(value, weight)
    if (slot >= 0) {
      this.exposition = undefined
      this.expositionWithExemplars = undefined
      this.protobuf = undefined
      if (!this.listed) this.#changes?.note(this)
      if (this.logging) {
        const since = this.since
        // Arrays of their exact length: a push grows one with spare room, kept by every series observed twice until its report.
        if (since === undefined) this.since = [value, weight]
        else if (since.length < SINCE_MAX) this.since = [...since, value, weight]
        else {
          this.logging = false
          this.since = undefined
        }
      }
    }
    return slot
  }

  /** Like `observe`, and makes this the bucket's exemplar (`labels` from `requestIdExemplar`). */
  observeWithExemplar(value: number, weight: number, labels: string, timestamp: number): void {
    const slot = this.observe(value, weight)
    if (slot < 0) return
    this.exemplars ??= new Array<Exemplar | undefined>(this.counts.length).fill(undefined)
    this.exemplars[slot] = { labels, value, timestamp }
  }
}

const NEWLINE = 0x0a
/** Series encoded between two empty pieces of `protobufChunks`, so the registry can yield. */
const RENDERS_PER_PIECE = 32
const EMPTY = Buffer.alloc(0)

export class Histogram extends Metric<HistogramSeries> {
  readonly type = 'histogram'
  readonly buckets: readonly number[]
  readonly native: NativeOptions | undefined
  readonly #bounds: Float64Array
  /** `0.005"} ` … `+Inf"} `: each bucket line's bound and what follows it up to the count. */
  readonly #leBytes: readonly Buffer[]
  /** The bytes of all of them, and of the longest. */
  readonly #leTotal: number
  readonly #leMax: number
  #header: Buffer | undefined
  #headerOpenMetrics: Buffer | undefined

  constructor(opts: HistogramOptions) {
    const buckets = [...new Set(opts.buckets)].filter((b) => Number.isFinite(b)).sort((a, b) => a - b)
    if (buckets.length === 0) throw new TypeError(`${opts.name}: at least one finite bucket is needed`)
    super(opts)
    this.buckets = buckets
    this.native = opts.native
    this.#bounds = Float64Array.from(buckets)
    this.#leBytes = [...buckets.map(formatValue), '+Inf'].map((le) => Buffer.from(`${le}"} `))
    this.#leTotal = this.#leBytes.reduce((n, b) => n + b.length, 0)
    this.#leMax = Math.max(...this.#leBytes.map((b) => b.length))
  }

  /** The child for these label values (in `labelNames` order), created on first use. */
  labels(...values: string[]): HistogramSeries {
    return this.seriesFor(
      values,
      () => new HistogramSeries(this.newCore(), values, renderLabels(this.labelNames, values), this.changes),
    )
  }

  /** An empty core with this family's buckets (a series', or one to merge workers' series into). */
  newCore(): HistogramCore {
    const n = this.native
    return new HistogramCore({
      bounds: this.#bounds,
      schema: n?.schema,
      zeroThreshold: n?.zeroThreshold,
      maxBuckets: n?.maxBuckets,
    })
  }

  /**
   * The exposition as bytes (Prometheus text and OpenMetrics, which adds exemplars): the header, then each series' cached
   * buffer, rendered again only after an observation. A buffer is rewritten in place: copy what you keep past it.
   */
  *chunks(openMetrics = false): Generator<Buffer> {
    if (openMetrics) {
      if (this.#headerOpenMetrics === undefined)
        this.#headerOpenMetrics = Buffer.from(header(this.name, this.help, this.type, true))
      yield this.#headerOpenMetrics
    } else {
      if (this.#header === undefined) this.#header = Buffer.from(header(this.name, this.help, this.type))
      yield this.#header
    }
    for (const s of this.series.values()) {
      if (openMetrics && s.exemplars !== undefined) {
        if (s.expositionWithExemplars === undefined) {
          writer.into(s.storeWithExemplars, this.#room(s, s.exemplars))
          this.#render(s, s.exemplars)
          const n = writer.length
          s.storeWithExemplars = writer.done()
          s.expositionWithExemplars = s.storeWithExemplars.subarray(0, n)
        }
        yield s.expositionWithExemplars
      } else {
        if (s.exposition === undefined) {
          writer.into(s.store, this.#room(s, undefined))
          this.#render(s, undefined)
          const n = writer.length
          s.store = writer.done()
          s.exposition = s.store.subarray(0, n)
        }
        yield s.exposition
      }
    }
  }

  /** The family as a delimited protobuf MetricFamily; a re-encoded series gets a fresh buffer, so a scrape holding one keeps it. */
  *protobufChunks(): Generator<Buffer> {
    const series: Buffer[] = []
    let rendered = 0
    for (const s of this.series.values()) {
      if (s.protobuf === undefined) {
        s.protobuf = histogramMetric(this.labelNames, s.labelValues, s.core, this.buckets, s.exemplars)
        // The length prefix needs every series first: empty pieces let the registry yield meanwhile.
        if (++rendered % RENDERS_PER_PIECE === 0) yield EMPTY
      }
      series.push(s.protobuf)
    }
    yield* familyChunks(this.name, this.help, MetricTypeCode.histogram, series)
  }

  /** A store's first size for whole-number counts: a cumulative count has no more digits than the total. */
  #room(s: HistogramSeries, exemplars: readonly (Exemplar | undefined)[] | undefined): number {
    if (s.lineBytes === undefined) s.lineBytes = this.#lineBytes(s)
    const fixed = s.lineBytes
    const countBytes = s.count >>> 0 === s.count ? String(s.count).length : MAX_NUMBER_BYTES
    let room =
      this.#leBytes.length * (fixed.bucket.length + countBytes + 1) +
      this.#leTotal +
      fixed.sum.length +
      fixed.count.length +
      MAX_NUMBER_BYTES +
      countBytes +
      2
    if (exemplars !== undefined) {
      for (const e of exemplars) if (e !== undefined) room += 3 * e.labels.length + 2 * MAX_NUMBER_BYTES + 7
    }
    return room
  }

  /** One series' lines as bytes, identical to the string form (test/metrics/exposition-exact.test.ts). */
  #render(s: HistogramSeries, exemplars: readonly (Exemplar | undefined)[] | undefined): void {
    const fixed = s.lineBytes as LineBytes
    const prefix = fixed.bucket
    const le = this.#leBytes
    const counts = s.counts
    const w = writer
    const line = prefix.length + this.#leMax + MAX_NUMBER_BYTES + 1
    let cumulative = 0
    for (let i = 0; i < le.length; i++) {
      cumulative += counts[i]
      w.reserve(line)
      w.bytes(prefix)
      w.short(le[i])
      w.number(cumulative)
      const e = exemplars?.[i]
      if (e !== undefined) w.utf8(` # {${e.labels}} ${formatValue(e.value)} ${e.timestamp.toFixed(3)}`)
      w.byte(NEWLINE)
    }
    w.reserve(fixed.sum.length + fixed.count.length + 2 * MAX_NUMBER_BYTES + 2)
    w.bytes(fixed.sum)
    w.value(s.sum)
    w.byte(NEWLINE)
    w.bytes(fixed.count)
    w.number(s.count)
    w.byte(NEWLINE)
  }

  #lineBytes(s: HistogramSeries): LineBytes {
    const name = this.name
    const braces = s.rendered.length > 0 ? `{${s.rendered}}` : ''
    return {
      bucket: Buffer.from(`${name}_bucket{${s.rendered.length > 0 ? `${s.rendered},` : ''}le="`),
      sum: Buffer.from(`${name}_sum${braces} `),
      count: Buffer.from(`${name}_count${braces} `),
    }
  }

  protected samples(): SampleJson[] {
    const values: SampleJson[] = []
    for (const s of this.series.values()) {
      const labels = this.labelRecord(s.labelValues)
      let cumulative = 0
      for (let i = 0; i <= this.buckets.length; i++) {
        cumulative += s.counts[i]
        values.push({
          labels: { ...labels, le: i < this.buckets.length ? this.buckets[i] : '+Inf' },
          value: cumulative,
          metricName: `${this.name}_bucket`,
        })
      }
      values.push({ labels, value: s.sum, metricName: `${this.name}_sum` })
      values.push({ labels, value: s.count, metricName: `${this.name}_count` })
    }
    return values
  }
}
