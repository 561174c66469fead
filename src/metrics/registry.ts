import { Registry, collectDefaultMetrics } from 'prom-client'
import type { Counter } from './counter.ts'
import type { CollectedGauge } from './gauge.ts'
import type { Histogram } from './histogram.ts'

/**
 * What `/metrics` serves: tokentap's own metrics (fast serializers) and prom-client's default
 * process metrics. Both are also registered in one prom-client Registry (`promRegistry`),
 * whose `getMetricsAsJSON()` feeds prom-client's cluster AggregatorRegistry.
 */

export type OwnMetric = Histogram | Counter | CollectedGauge

export const PROMETHEUS_CONTENT_TYPE = Registry.PROMETHEUS_CONTENT_TYPE
export const OPENMETRICS_CONTENT_TYPE = Registry.OPENMETRICS_CONTENT_TYPE

const NON_COUNTERS_NAMED_TOTAL = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const

export class MetricsRegistry {
  readonly promRegistry = new Registry()
  readonly #process = new Registry()
  readonly #own: OwnMetric[] = []

  constructor(opts: { processMetrics: boolean }) {
    if (opts.processMetrics) {
      collectDefaultMetrics({ register: this.#process })
      // Gauges named like counters (`promtool check metrics` flags them); the same numbers
      // are in nodejs_active_handles / _requests / _resources, summed over their `type` label.
      for (const name of NON_COUNTERS_NAMED_TOTAL) this.#process.removeSingleMetric(name)
    }
  }

  register(metric: OwnMetric): void {
    this.#own.push(metric)
    this.promRegistry.registerMetric(metric as never)
  }

  /** Prometheus text format 0.0.4. */
  async render(): Promise<string> {
    let out = ''
    for (const m of this.#own) out += m.serialize() + '\n'
    const process = await this.#process.metrics()
    return out + process
  }

  /** prom-client JSON of every metric, own and process (what cluster workers send to the primary). */
  async json(): Promise<unknown[]> {
    const own = this.#own.map((m) => m.get())
    const process = await this.#process.getMetricsAsJSON()
    return [...own, ...process]
  }
}
