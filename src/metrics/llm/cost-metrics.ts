import { Counter } from '../prometheus/counter.ts'
import type { CounterSeries } from '../prometheus/counter.ts'
import { Histogram } from '../prometheus/histogram.ts'
import type { HistogramSeries, NativeOptions } from '../prometheus/histogram.ts'
import { LabelSlot } from '../../record/labels.ts'
import type { Observations } from '../../record/observations.ts'

/** The cost families (with `pricing:` set): a plain map of `Observations.cost`, which src/cost/cost.ts decides (docs/cost.md). */

/** One request's cost in the currency: 0.00001 … 100, about ×3 apart. */
const REQUEST_COST_BUCKETS = [
  0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100,
] as const

export class CostMetrics {
  readonly cost: Counter
  readonly requestCost: Histogram
  readonly unpriced: Counter
  readonly #currency: string
  /** A label set's series, by kind (and source): a request looks each up once. */
  readonly #slot = new LabelSlot<{
    readonly cost: Map<string, CounterSeries>
    readonly unpriced: Map<string, CounterSeries>
    perRequest: HistogramSeries | undefined
  }>()

  constructor(currency: string, labelNames: readonly string[], native?: NativeOptions) {
    this.#currency = currency
    this.cost = new Counter({
      name: 'llm_cost_total',
      help: 'Cost of the tokens by kind (input = uncached input, output = output without reasoning, cache_read, cache_write, reasoning): token counts times the price table, in the currency named; source as on llm_output_tokens_total (estimate: the count was estimated).',
      labelNames: [...labelNames, 'kind', 'currency', 'source'],
    })
    this.requestCost = new Histogram({
      name: 'llm_request_cost',
      help: 'Cost of one request in the currency named, once per request with priced tokens.',
      labelNames: [...labelNames, 'currency'],
      buckets: REQUEST_COST_BUCKETS,
      native,
    })
    this.unpriced = new Counter({
      name: 'llm_unpriced_tokens_total',
      help: 'Tokens by kind that could not be priced: the model has no price, or none for that kind (they are in no llm_cost_total).',
      labelNames: [...labelNames, 'kind'],
    })
  }

  all(): readonly (Counter | Histogram)[] {
    return [this.cost, this.requestCost, this.unpriced]
  }

  record(o: Observations): void {
    const cost = o.cost
    if (cost === undefined) return
    const set = o.labelSet
    const v = set.values as string[]
    const b =
      this.#slot.get(set) ?? this.#slot.put(set, { cost: new Map(), unpriced: new Map(), perRequest: undefined })
    let priced = false
    for (const k of cost.kinds) {
      if (k.unpriced > 0) {
        let s = b.unpriced.get(k.kind)
        if (s === undefined) {
          s = this.unpriced.labels(...v, k.kind)
          b.unpriced.set(k.kind, s)
        }
        s.inc(k.unpriced)
      }
      if (k.tokens > k.unpriced) {
        priced = true
        const key = `${k.kind}\u0000${k.source}`
        let s = b.cost.get(key)
        if (s === undefined) {
          s = this.cost.labels(...v, k.kind, this.#currency, k.source)
          b.cost.set(key, s)
        }
        s.inc(k.cost)
      }
    }
    if (priced) {
      b.perRequest ??= this.requestCost.labels(...v, this.#currency)
      b.perRequest.observe(cost.total)
    }
  }
}
