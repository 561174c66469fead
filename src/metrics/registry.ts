import { Registry, collectDefaultMetrics } from 'prom-client'
import type { Counter } from './counter.ts'
import type { CollectedGauge } from './gauge.ts'
import type { Histogram } from './histogram.ts'
import { promClientToOpenMetrics } from './openmetrics.ts'
import type { PromClientMetric } from './openmetrics.ts'

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
  /** `render(true)` writes OpenMetrics with exemplars. */
  readonly supportsOpenMetrics = true
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

  /**
   * Prometheus text format 0.0.4, or OpenMetrics 1.0 (exemplars included, no blank lines,
   * ends with `# EOF`).
   */
  async render(openMetrics = false): Promise<string> {
    let out = ''
    if (!openMetrics) {
      for (const m of this.#own) out += m.serialize() + '\n'
      return out + (await this.#process.metrics())
    }
    for (const m of this.#own) out += m.serialize(true)
    const process = (await this.#process.getMetricsAsJSON()) as unknown as PromClientMetric[]
    return out + promClientToOpenMetrics(process) + '# EOF\n'
  }

  /** prom-client JSON of every metric, own and process (what cluster workers send to the primary). */
  async json(): Promise<unknown[]> {
    const own = this.#own.map((m) => m.get())
    const process = await this.#process.getMetricsAsJSON()
    return [...own, ...process]
  }
}
