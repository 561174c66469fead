import { escapeLabelValue, formatValue, header, renderLabels } from './format.ts'
import { Metric } from './metric.ts'
import type { MetricOptions, SampleJson } from './metric.ts'

/**
 * A classic Prometheus histogram with label children bound once and weighted observations:
 * `observe(v, k)` counts k observations of v in one step (token-weighted ITL observes g/k k times).
 */

export interface HistogramOptions extends MetricOptions {
  readonly buckets: readonly number[]
}

/** The latest observation of one bucket, for OpenMetrics exemplars. */
export interface Exemplar {
  /** Rendered label set, without braces: `request_id="…"`. */
  readonly labels: string
  readonly value: number
  /** Wall-clock seconds since the epoch. */
  readonly timestamp: number
}

/**
 * OpenMetrics caps an exemplar's label set at 128 UTF-8 characters (names and values together).
 * `request_id` takes 10 of them, so ids are cut to 118 code points.
 */
const MAX_EXEMPLAR_VALUE = 128 - 'request_id'.length

/** `request_id="…"` for an exemplar, escaped and cut to the OpenMetrics limit. */
export function requestIdExemplar(id: string): string {
  const chars = [...id]
  const value = chars.length > MAX_EXEMPLAR_VALUE ? chars.slice(0, MAX_EXEMPLAR_VALUE).join('') : id
  return `request_id="${escapeLabelValue(value)}"`
}

export class HistogramSeries {
  readonly labelValues: readonly string[]
  /** Rendered `a="x",b="y"` of this series' labels. */
  readonly rendered: string
  /** Non-cumulative counts per bucket; the last slot is +Inf. */
  readonly counts: Float64Array
  sum = 0
  count = 0
  /** Latest exemplar per bucket (same slots as `counts`), allocated on the first one. */
  exemplars: (Exemplar | undefined)[] | undefined
  /**
   * This series' exposition lines, kept between scrapes until its next observation: without
   * exemplars the Prometheus text and OpenMetrics lines are the same bytes.
   */
  exposition: Buffer | undefined
  /** The OpenMetrics lines with exemplars (only when the series has any), cached like `exposition`. */
  expositionWithExemplars: Buffer | undefined
  readonly #bounds: Float64Array

  constructor(bounds: Float64Array, labelValues: readonly string[], rendered: string) {
    this.#bounds = bounds
    this.labelValues = labelValues
    this.rendered = rendered
    this.counts = new Float64Array(bounds.length + 1)
  }

  /** Records `weight` observations of `value`; returns the bucket slot, or -1 when nothing was recorded. */
  observe(value: number, weight = 1): number {
    if (!(weight > 0) || Number.isNaN(value)) return -1
    const bounds = this.#bounds
    // Smallest bucket whose upper bound is ≥ value (le is inclusive).
    let lo = 0
    let hi = bounds.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (bounds[mid] < value) lo = mid + 1
      else hi = mid
    }
    this.counts[lo] += weight
    this.sum += value * weight
    this.count += weight
    this.exposition = undefined
    this.expositionWithExemplars = undefined
    return lo
  }

  /** Like `observe`, and makes this the bucket's exemplar (`labels` from `requestIdExemplar`). */
  observeWithExemplar(value: number, weight: number, labels: string, timestamp: number): void {
    const slot = this.observe(value, weight)
    if (slot < 0) return
    this.exemplars ??= new Array<Exemplar | undefined>(this.counts.length).fill(undefined)
    this.exemplars[slot] = { labels, value, timestamp }
  }
}

export class Histogram extends Metric<HistogramSeries> {
  readonly type = 'histogram'
  readonly buckets: readonly number[]
  readonly #bounds: Float64Array
  readonly #leStrings: readonly string[]
  #header: Buffer | undefined
  #headerOpenMetrics: Buffer | undefined

  constructor(opts: HistogramOptions) {
    const buckets = [...new Set(opts.buckets)].filter((b) => Number.isFinite(b)).sort((a, b) => a - b)
    if (buckets.length === 0) throw new TypeError(`${opts.name}: at least one finite bucket is needed`)
    super(opts)
    this.buckets = buckets
    this.#bounds = Float64Array.from(buckets)
    this.#leStrings = [...buckets.map(formatValue), '+Inf']
  }

  /** The child for these label values (in `labelNames` order), created on first use. */
  labels(...values: string[]): HistogramSeries {
    return this.seriesFor(values, () => new HistogramSeries(this.#bounds, values, renderLabels(this.labelNames, values)))
  }

  /**
   * The exposition as bytes (Prometheus 0.0.4 and OpenMetrics share this shape; OpenMetrics adds
   * each bucket's exemplar: `… count # {request_id="x"} value timestamp`): the header, then one
   * buffer per series. A series is rendered
   * again only after it was observed, so a scrape of many quiet series is mostly a copy, and a
   * big scrape is never one huge string (which V8 would have to flatten and encode in one go).
   * OpenMetrics shares the cached bytes of every series without exemplars.
   */
  *chunks(openMetrics = false): Generator<Buffer> {
    if (openMetrics) {
      if (this.#headerOpenMetrics === undefined) this.#headerOpenMetrics = Buffer.from(header(this.name, this.help, this.type, true))
      yield this.#headerOpenMetrics
    } else {
      if (this.#header === undefined) this.#header = Buffer.from(header(this.name, this.help, this.type))
      yield this.#header
    }
    for (const s of this.series.values()) {
      if (openMetrics && s.exemplars !== undefined) {
        if (s.expositionWithExemplars === undefined) s.expositionWithExemplars = this.#render(s, true)
        yield s.expositionWithExemplars
      } else {
        if (s.exposition === undefined) s.exposition = this.#render(s, false)
        yield s.exposition
      }
    }
  }

  #render(s: HistogramSeries, openMetrics: boolean): Buffer {
    const name = this.name
    const le = this.#leStrings
    const open = `${name}_bucket{${s.rendered.length > 0 ? `${s.rendered},` : ''}le="`
    const exemplars = openMetrics ? s.exemplars : undefined
    let out = ''
    let cumulative = 0
    for (let i = 0; i < le.length; i++) {
      cumulative += s.counts[i]
      const e = exemplars?.[i]
      out += e === undefined ? `${open}${le[i]}"} ${cumulative}\n` : `${open}${le[i]}"} ${cumulative} # {${e.labels}} ${formatValue(e.value)} ${e.timestamp.toFixed(3)}\n`
    }
    const braces = s.rendered.length > 0 ? `{${s.rendered}}` : ''
    out += `${name}_sum${braces} ${formatValue(s.sum)}\n${name}_count${braces} ${s.count}\n`
    return Buffer.from(out)
  }

  protected samples(): SampleJson[] {
    const values: SampleJson[] = []
    for (const s of this.series.values()) {
      const labels = this.labelRecord(s.labelValues)
      let cumulative = 0
      for (let i = 0; i <= this.buckets.length; i++) {
        cumulative += s.counts[i]
        values.push({ labels: { ...labels, le: i < this.buckets.length ? this.buckets[i] : '+Inf' }, value: cumulative, metricName: `${this.name}_bucket` })
      }
      values.push({ labels, value: s.sum, metricName: `${this.name}_sum` })
      values.push({ labels, value: s.count, metricName: `${this.name}_count` })
    }
    return values
  }
}
