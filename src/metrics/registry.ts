import { performance } from 'node:perf_hooks'
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

const NEWLINE = Buffer.from('\n')
/** Longest run of scrape work between two turns of the event loop. */
const SLICE_MS = 2

/** Lets the event loop run (I/O first) before the caller goes on. */
export const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

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
    return Buffer.concat(await this.collect(openMetrics)).toString('utf8')
  }

  /**
   * The same text as a list of buffers for the /metrics response: mostly each series' cached
   * bytes (nothing is copied), rendered anew only for series observed since the last scrape.
   * Yields to the event loop every couple of milliseconds of work, so a scrape of thousands of
   * series never holds up the streams being proxied.
   */
  async collect(openMetrics = false): Promise<Buffer[]> {
    const out: Buffer[] = []
    let slice = performance.now()
    for (const m of this.#own) {
      if ('chunks' in m) {
        for (const b of m.chunks(openMetrics)) {
          out.push(b)
          if (performance.now() - slice > SLICE_MS) {
            await yieldToLoop()
            slice = performance.now()
          }
        }
      } else {
        out.push(Buffer.from(m.serialize(openMetrics)))
      }
      // OpenMetrics allows no blank lines between families.
      if (!openMetrics) out.push(NEWLINE)
    }
    if (openMetrics) {
      const process = (await this.#process.getMetricsAsJSON()) as unknown as PromClientMetric[]
      out.push(Buffer.from(promClientToOpenMetrics(process) + '# EOF\n'))
    } else {
      out.push(Buffer.from(await this.#process.metrics()))
    }
    return out
  }


  /** prom-client JSON of every metric, own and process (what cluster workers send to the primary). */
  async json(): Promise<unknown[]> {
    const own = this.#own.map((m) => m.get())
    const process = await this.#process.getMetricsAsJSON()
    return [...own, ...process]
  }
}
