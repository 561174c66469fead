import { lineChunks } from './byte-writer.ts'
import { header, renderLabels } from './format.ts'
import { Metric } from './metric.ts'
import type { ChangeLog } from './metric.ts'
import { MetricTypeCode, VALUE_FIELD, familyChunks, valueMetric } from './protobuf.ts'
import type { MetricOptions, SampleJson } from './metric.ts'

/** A Prometheus counter with label children bound once. */

export type CounterOptions = MetricOptions

export class CounterSeries {
  readonly labelValues: readonly string[]
  readonly rendered: string
  /** `name{labels} `: the sample line up to its value. */
  readonly line: string
  /** `line` as UTF-8, made at the first scrape. */
  lineBytes: Buffer | undefined
  value = 0
  /** Listed as changed in its family's ChangeLog since the tracking reader last took it (or no one tracks). */
  listed = true
  /** Its number in the tracking reader's reports (metric.ts, `Tracked`). */
  reportId = -1
  readonly #changes: ChangeLog<CounterSeries> | undefined

  constructor(labelValues: readonly string[], rendered: string, line: string, changes?: ChangeLog<CounterSeries>) {
    this.labelValues = labelValues
    this.rendered = rendered
    this.line = line
    this.#changes = changes
  }

  inc(by = 1): void {
    if (!(by > 0)) return
    this.value += by
    if (!this.listed) this.#changes?.note(this)
  }
}

export class Counter extends Metric<CounterSeries> {
  readonly type = 'counter'

  constructor(opts: CounterOptions) {
    if (!opts.name.endsWith('_total')) throw new TypeError(`counter ${opts.name} must end in _total`)
    super(opts)
  }

  labels(...values: string[]): CounterSeries {
    return this.seriesFor(values, () => {
      const rendered = renderLabels(this.labelNames, values)
      return new CounterSeries(
        values,
        rendered,
        `${this.name}${rendered.length > 0 ? `{${rendered}}` : ''} `,
        this.changes,
      )
    })
  }

  /** The header, then the series in groups of lines; OpenMetrics names the family without `_total` (https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md#counter). */
  *chunks(openMetrics = false): Generator<Buffer> {
    const family = openMetrics ? this.name.slice(0, -'_total'.length) : this.name
    yield Buffer.from(header(family, this.help, this.type, openMetrics))
    yield* lineChunks(
      this.series.values(),
      (s) => (s.lineBytes ??= Buffer.from(s.line)),
      (s) => s.value,
    )
  }

  *protobufChunks(): Generator<Buffer> {
    const series = Array.from(this.series.values(), (s) =>
      valueMetric(VALUE_FIELD.counter, this.labelNames, s.labelValues, s.value),
    )
    yield* familyChunks(this.name, this.help, MetricTypeCode.counter, series)
  }

  protected samples(): SampleJson[] {
    return Array.from(this.series.values(), (s) => ({ labels: this.labelRecord(s.labelValues), value: s.value }))
  }
}
