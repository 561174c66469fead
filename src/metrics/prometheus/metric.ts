/**
 * The base of tokentap's own metric families: own, not prom-client's, because ITL needs weighted observations and
 * a scrape of many series must be cheap (cached bytes per series); prom-client serves only the process metrics.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram'

/** One sample in the JSON form (prom-client's `getMetricsAsJSON()` shape, which its cluster aggregator sums). */
export interface SampleJson {
  readonly labels: Record<string, string | number>
  readonly value: number
  /** The sample's own name where it differs from the family's (`_bucket`, `_sum`, `_count`). */
  readonly metricName?: string
}

/** One family in the JSON form: what a cluster worker sends the primary. */
export interface MetricJson {
  readonly name: string
  readonly help: string
  readonly type: string
  readonly aggregator: string
  readonly values: readonly SampleJson[]
}

export interface MetricOptions {
  readonly name: string
  readonly help: string
  readonly labelNames: readonly string[]
}

/** The map key of a label set. */
export const seriesKey = (values: readonly string[]): string => values.join('\u0000')

/**
 * The series of a family changed since the one reader tracking them (the cluster worker's StateReporter) last took
 * them, so its report costs what changed rather than a scan of every series. A series is listed once
 * (`listed`); a family no one tracks lists nothing.
 */
/** What a family's series carry for the one reader tracking its changes (the cluster worker's StateReporter). */
export interface Tracked {
  readonly labelValues: readonly string[]
  /** Listed as changed since the tracking reader last took it (or no one tracks). */
  listed: boolean
  /** Its number in the tracking reader's reports (−1: none yet); a reader that takes a family over numbers it again. */
  reportId: number
}

export class ChangeLog<S extends { listed: boolean }> {
  owner: object | undefined
  list: S[] = []

  /** A series' first change since it was last taken: listed, when someone tracks. */
  note(s: S): void {
    s.listed = true
    if (this.owner !== undefined) this.list.push(s)
  }
}

export abstract class Metric<S extends Tracked> {
  readonly name: string
  readonly help: string
  readonly labelNames: readonly string[]
  abstract readonly type: MetricType
  /** Workers' values add up in the cluster primary. */
  readonly aggregator = 'sum'
  protected readonly series = new Map<string, S>()
  /** Series changed since the tracking reader last took them (`trackChanges`, `takeChanged`). */
  protected readonly changes = new ChangeLog<S>()

  constructor(opts: MetricOptions) {
    this.name = opts.name
    this.help = opts.help
    this.labelNames = opts.labelNames
  }

  get seriesCount(): number {
    return this.series.size
  }

  /** The series in creation order (the cluster worker's state message reads them). */
  entries(): IterableIterator<S> {
    return this.series.values()
  }

  /** The series of these label values (in `labelNames` order), made by `create` on first use. */
  protected seriesFor(values: readonly string[], create: () => S): S {
    const key = seriesKey(values)
    let s = this.series.get(key)
    if (s === undefined) {
      s = create()
      this.series.set(key, s)
      // A new series is a change (its first report sends its labels).
      this.changes.note(s)
    }
    return s
  }

  /** From now on `owner` reads this family's changes (`takeChanged`): every series counts as taken. */
  trackChanges(owner: object): void {
    this.changes.owner = owner
    this.changes.list = []
    for (const s of this.series.values()) s.listed = false
  }

  /** Whether `owner` is the reader tracking this family's changes (the last to call `trackChanges`). */
  trackedBy(owner: object): boolean {
    return this.changes.owner === owner
  }

  /** The series changed since `owner` last took them, each once; undefined when `owner` does not track this family. */
  takeChanged(owner: object): readonly S[] | undefined {
    const changes = this.changes
    if (changes.owner !== owner) return undefined
    const out = changes.list
    changes.list = []
    for (const s of out) s.listed = false
    return out
  }

  /** `{name: value}` of a series' labels, for the JSON form. */
  protected labelRecord(values: readonly string[]): Record<string, string> {
    const labels: Record<string, string> = {}
    for (let i = 0; i < this.labelNames.length; i++) labels[this.labelNames[i]] = values[i]
    return labels
  }

  /** The text exposition as bytes, header first, in pieces of a few KiB. */
  abstract chunks(openMetrics?: boolean): Generator<Buffer>

  /** The family as one length-delimited protobuf MetricFamily (protobuf.ts), in pieces. */
  abstract protobufChunks(): Generator<Buffer>

  protected abstract samples(): SampleJson[]

  /** The family in the JSON form (cluster workers → primary). */
  get(): MetricJson {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: this.samples() }
  }
}
