import { formatValue, header, renderLabels } from './format.ts'

/** A Prometheus counter with label children bound once. Same roles as `Histogram`. */

export interface CounterOptions {
  readonly name: string
  readonly help: string
  readonly labelNames: readonly string[]
}

export class CounterSeries {
  readonly labelValues: readonly string[]
  readonly rendered: string
  value = 0

  constructor(labelValues: readonly string[], rendered: string) {
    this.labelValues = labelValues
    this.rendered = rendered
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
      series = new CounterSeries(values, renderLabels(this.labelNames, values))
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
    const family = openMetrics ? this.name.slice(0, -'_total'.length) : this.name
    let out = header(family, this.help, this.type, openMetrics)
    for (const s of this.#series.values()) {
      out += `${this.name}${s.rendered.length > 0 ? `{${s.rendered}}` : ''} ${formatValue(s.value)}\n`
    }
    return out
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
