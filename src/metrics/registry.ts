import { performance } from 'node:perf_hooks'
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

const NEWLINE = Buffer.from('\n')
const BATCH_BYTES = 64 * 1024
/** Longest run of scrape work between two turns of the event loop. */
const SLICE_MS = 2

export const PROMETHEUS_CONTENT_TYPE = Registry.PROMETHEUS_CONTENT_TYPE
export const OPENMETRICS_CONTENT_TYPE = Registry.OPENMETRICS_CONTENT_TYPE

export class MetricsRegistry {
  readonly promRegistry = new Registry()
  readonly #process = new Registry()
  readonly #own: OwnMetric[] = []

  constructor(opts: { processMetrics: boolean }) {
    if (opts.processMetrics) collectDefaultMetrics({ register: this.#process })
  }

  register(metric: OwnMetric): void {
    this.#own.push(metric)
    this.promRegistry.registerMetric(metric as never)
  }

  /** Prometheus text format 0.0.4. */
  async render(): Promise<string> {
    const parts: Buffer[] = []
    for await (const b of this.stream()) parts.push(b)
    return Buffer.concat(parts).toString('utf8')
  }

  /**
   * The same text as a stream of ~64 KiB buffers for the /metrics response. It yields to the
   * event loop every couple of milliseconds of work, so a scrape of thousands of series never
   * holds up the streams being proxied.
   */
  async *stream(): AsyncGenerator<Buffer> {
    let batch: Buffer[] = []
    let size = 0
    let slice = performance.now()
    for (const m of this.#own) {
      const parts: Iterable<Buffer> = 'chunks' in m ? m.chunks() : [Buffer.from(m.serialize())]
      for (const b of [...parts, NEWLINE]) {
        batch.push(b)
        size += b.length
        if (size >= BATCH_BYTES) {
          yield Buffer.concat(batch, size)
          batch = []
          size = 0
        }
        if (performance.now() - slice > SLICE_MS) {
          await new Promise<void>((resolve) => setImmediate(resolve))
          slice = performance.now()
        }
      }
    }
    batch.push(Buffer.from(await this.#process.metrics()))
    yield Buffer.concat(batch)
  }

  /** prom-client JSON of every metric, own and process (what cluster workers send to the primary). */
  async json(): Promise<unknown[]> {
    const own = this.#own.map((m) => m.get())
    const process = await this.#process.getMetricsAsJSON()
    return [...own, ...process]
  }
}
