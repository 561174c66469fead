import { lineChunks } from './byte-writer.ts'
import { header, renderLabels } from './format.ts'
import { Metric, seriesKey } from './metric.ts'
import { MetricTypeCode, VALUE_FIELD, familyChunks, valueMetric } from './protobuf.ts'
import type { MetricOptions, SampleJson } from './metric.ts'

/** A gauge counted at scrape time; a label set once seen reports 0 when nothing counts for it, instead of vanishing. */

export interface CollectedGaugeOptions extends MetricOptions {
  /** Calls `add(labelValues, value)` for every current contribution. */
  readonly collect: (add: (labelValues: readonly string[], value: number) => void) => void
}

interface Entry {
  readonly labelValues: readonly string[]
  readonly rendered: string
  /** `name{labels} ` as UTF-8, made at the first scrape. */
  line: Buffer | undefined
  value: number
  /** Not tracked (Metric's ChangeLog): a collected gauge's reader compares values (`takeChangedValues`). */
  listed: boolean
  /** The value the tracking reader last took. */
  sent: number
  reportId: number
}

/** A label set of a collected gauge and its count now (`reportId`: Metric's `Tracked`). */
export interface GaugeSample {
  readonly labelValues: readonly string[]
  readonly value: number
  reportId: number
}

/** At most this many label sets are remembered at 0; older ones are dropped first. */
const MAX_REMEMBERED = 10_000

export class CollectedGauge extends Metric<Entry> {
  readonly type = 'gauge'
  readonly #collect: CollectedGaugeOptions['collect']

  constructor(opts: CollectedGaugeOptions) {
    super(opts)
    this.#collect = opts.collect
  }

  /** Makes sure a label set is reported (at 0 when nothing counts for it). */
  touch(labelValues: readonly string[]): void {
    this.#entry(labelValues)
  }

  /** `touch` with the label set's series key already made (`seriesKey(labelValues)`). */
  touchKey(key: string, labelValues: readonly string[]): void {
    this.#entry(labelValues, key)
  }

  #entry(labelValues: readonly string[], key = seriesKey(labelValues)): Entry {
    const entries = this.series
    let e = entries.get(key)
    if (e === undefined) {
      if (entries.size >= MAX_REMEMBERED) {
        for (const [k, old] of entries) {
          if (old.value === 0) {
            entries.delete(k)
            break
          }
        }
      }
      e = {
        labelValues: [...labelValues],
        rendered: renderLabels(this.labelNames, labelValues),
        line: undefined,
        value: 0,
        listed: true,
        sent: Number.NaN,
        reportId: -1,
      }
      entries.set(key, e)
    }
    return e
  }

  /**
   * Counts now, and of them the label sets whose count changed since `owner` (the cluster worker's StateReporter)
   * last took them: every one with `all`, or when another reader took them last.
   */
  takeChangedValues(owner: object, all: boolean): readonly GaugeSample[] {
    const every = all || !this.trackedBy(owner)
    this.changes.owner = owner
    const out: Entry[] = []
    for (const e of this.#snapshot().values()) {
      if (!every && e.value === e.sent) continue
      e.sent = e.value
      out.push(e)
    }
    return out
  }

  #snapshot(): Map<string, Entry> {
    for (const e of this.series.values()) e.value = 0
    this.#collect((labelValues, value) => {
      this.#entry(labelValues).value += value
    })
    return this.series
  }

  /** The exposition as bytes: the header, then the label sets counted now, in groups of lines. */
  *chunks(openMetrics = false): Generator<Buffer> {
    // One consistent snapshot, copied: a concurrent scrape counts into the same entries.
    const counted = Array.from(this.#snapshot().values(), (e) => ({ entry: e, value: e.value }))
    yield Buffer.from(header(this.name, this.help, this.type, openMetrics))
    yield* lineChunks(
      counted,
      (c) => (c.entry.line ??= Buffer.from(`${this.name}{${c.entry.rendered}} `)),
      (c) => c.value,
    )
  }

  *protobufChunks(): Generator<Buffer> {
    const series = Array.from(this.#snapshot().values(), (e) =>
      valueMetric(VALUE_FIELD.gauge, this.labelNames, e.labelValues, e.value),
    )
    yield* familyChunks(this.name, this.help, MetricTypeCode.gauge, series)
  }

  protected samples(): SampleJson[] {
    return Array.from(this.#snapshot().values(), (e) => ({ labels: this.labelRecord(e.labelValues), value: e.value }))
  }
}
