import { formatValue, header, lineChunks, renderLabels } from './format.ts'

/** A Prometheus counter with label children bound once. Same roles as `Histogram`. */

export interface CounterOptions {
  readonly name: string
  readonly help: string
  readonly labelNames: readonly string[]
}

export class CounterSeries {
  readonly labelValues: readonly string[]
  readonly rendered: string
  /** `name{labels} `: the sample line up to its value. */
  readonly line: string
  value = 0

  constructor(labelValues: readonly string[], rendered: string, line: string) {
    this.labelValues = labelValues
    this.rendered = rendered
    this.line = line
  }

  inc(by = 1): void {
    if (by > 0) this.value += by
  }
}

export class Counter {
  readonly name: string
  readonly help: string
  readonly type = 'counter'
  readonly aggregator = 'sum'
  readonly labelNames: readonly string[]
  #series = new Map<string, CounterSeries>()

  constructor(opts: CounterOptions) {
    if (!opts.name.endsWith('_total')) throw new TypeError(`counter ${opts.name} must end in _total`)
    this.name = opts.name
    this.help = opts.help
    this.labelNames = opts.labelNames
  }

  labels(...values: string[]): CounterSeries {
    const key = values.join('\u0000')
    let series = this.#series.get(key)
    if (series === undefined) {
      const rendered = renderLabels(this.labelNames, values)
      series = new CounterSeries(values, rendered, `${this.name}${rendered.length > 0 ? `{${rendered}}` : ''} `)
      this.#series.set(key, series)
    }
    return series
  }

  reset(): void {
    this.#series = new Map()
  }

  /**
   * Text exposition. OpenMetrics names the counter family without `_total`
   * (https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md#counter).
   */
  serialize(openMetrics = false): string {
    let out = ''
    for (const b of this.chunks(openMetrics)) out += b.toString('utf8')
    return out
  }

  /** The exposition as bytes: the header, then the series in groups of `LINES_PER_CHUNK`. */
  *chunks(openMetrics = false): Generator<Buffer> {
    const family = openMetrics ? this.name.slice(0, -'_total'.length) : this.name
    yield Buffer.from(header(family, this.help, this.type, openMetrics))
    yield* lineChunks(this.#series.values(), (s) => `${s.line}${formatValue(s.value)}\n`)
  }

  get(): { name: string; help: string; type: 'counter'; aggregator: 'sum'; values: { labels: Record<string, string>; value: number }[] } {
    const values = [...this.#series.values()].map((s) => {
      const labels: Record<string, string> = {}
      this.labelNames.forEach((n, i) => (labels[n] = s.labelValues[i]))
      return { labels, value: s.value }
    })
    return { name: this.name, help: this.help, type: 'counter', aggregator: 'sum', values }
  }
}
