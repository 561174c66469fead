import { performance } from 'node:perf_hooks'
import { Registry, collectDefaultMetrics } from 'prom-client'
import type { Counter } from './counter.ts'
import type { CollectedGauge } from './gauge.ts'
import type { Histogram } from './histogram.ts'
import type { MetricJson } from './metric.ts'
import { promClientToOpenMetrics } from './openmetrics.ts'
import type { PromClientMetric } from './openmetrics.ts'
import type { MetricsSource } from './source.ts'

/**
 * What `/metrics` serves in one process: tokentap's own metric families (cached bytes per
 * series) and prom-client's default process metrics (prom-client is used for nothing else).
 */

export type OwnMetric = Histogram | Counter | CollectedGauge

const NEWLINE = Buffer.from('\n')
const EOF = Buffer.from('# EOF\n')
/**
 * Longest run of scrape work (rendering, and the caller's writes of what was rendered) before
 * the event loop gets a turn: a scrape of any size never delays the proxied streams by more.
 */
const SLICE_MS = 1
/** Bytes handed to the caller at a time (one socket write). */
export const BATCH_BYTES = 128 * 1024

/** Lets the event loop run (I/O first) before the caller goes on. */
const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

const NON_COUNTERS_NAMED_TOTAL = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const

export class MetricsRegistry implements MetricsSource {
  /** `exposition(true)` writes OpenMetrics with exemplars. */
  readonly openMetrics = true
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
  }

  /**
   * The whole exposition as one string: what an app that embeds the plugin serves on a route of
   * its own (`reply.type(PROMETHEUS_CONTENT_TYPE).send(await app.tokentap.registry.text())`).
   */
  async text(openMetrics = false): Promise<string> {
    const parts: Buffer[] = []
    for await (const batch of this.exposition(openMetrics)) parts.push(...batch)
    return Buffer.concat(parts).toString('utf8')
  }

  /**
   * Prometheus text format 0.0.4, or OpenMetrics 1.0 (exemplars included, no blank lines, ends
   * with `# EOF`), in batches of about `BATCH_BYTES`, for /metrics to write as they come: mostly
   * each series' cached bytes, rendered anew only for series observed since the last scrape.
   * The work between two turns of the event loop stays under `SLICE_MS` (the caller's write of
   * a piece counts, as it runs before the next piece is asked for), so a scrape of any size
   * never holds up the streams being proxied. Every series is in it exactly once, each as it
   * was at one instant; series created meanwhile are included when their family comes later.
   */
  async *exposition(openMetrics = false): AsyncGenerator<Buffer[]> {
    let batch: Buffer[] = []
    let bytes = 0
    const add = (piece: Buffer): void => {
      batch.push(piece)
      bytes += piece.length
    }
    // Handed over as they are (not concatenated): most are cached, and a copy would cost more than a writev.
    const take = (): Buffer[] => {
      const out = batch
      batch = []
      bytes = 0
      return out
    }
    // prom-client's process metrics first, all at once (a few dozen samples), and sent last:
    // counted before the scrape's own yields, they never see its pending setImmediate
    // (nodejs_active_resources{type="Immediate"}) nor its writes.
    const processText = Buffer.from(openMetrics ? promClientToOpenMetrics((await this.#process.getMetricsAsJSON()) as unknown as PromClientMetric[]) : await this.#process.metrics())
    let slice = performance.now()
    for (const m of this.#own) {
      for (const b of m.chunks(openMetrics)) {
        add(b)
        if (bytes >= BATCH_BYTES) yield take()
        if (performance.now() - slice > SLICE_MS) {
          if (bytes > 0) yield take()
          await yieldToLoop()
          slice = performance.now()
        }
      }
      // OpenMetrics allows no blank lines between families.
      if (!openMetrics) add(NEWLINE)
    }
    add(processText)
    if (openMetrics) add(EOF)
    if (bytes > 0) yield take()
  }

  /** Every family in the JSON form, own and process (what cluster workers send to the primary). */
  async json(): Promise<MetricJson[]> {
    const own = this.#own.map((m) => m.get())
    const process = (await this.#process.getMetricsAsJSON()) as unknown as MetricJson[]
    return [...own, ...process]
  }
}
