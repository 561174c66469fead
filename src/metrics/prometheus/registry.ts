import { channel } from 'node:diagnostics_channel'
import { Registry, collectDefaultMetrics } from 'prom-client'
import { monotonicNow } from '../../clock.ts'
import { BatchPool } from './batch-pool.ts'
import type { Counter } from './counter.ts'
import type { CollectedGauge } from './gauge.ts'
import type { Histogram } from './histogram.ts'
import type { MetricJson } from './metric.ts'
import { promClientToOpenMetrics } from './openmetrics.ts'
import type { PromClientMetric } from './openmetrics.ts'
import { promClientToProtobuf } from './protobuf.ts'
import type { MetricsSource } from './source.ts'

type ExpositionFormat = 'text' | 'openmetrics' | 'protobuf'

/**
 * What `/metrics` serves in one process: tokentap's own metric families (cached bytes per
 * series) and prom-client's default process metrics (prom-client is used for nothing else).
 */

export type OwnMetric = Histogram | Counter | CollectedGauge

/** What process metrics are read from: a prom-client registry. */
export type ProcessSource = Pick<Registry, 'metrics' | 'getMetricsAsJSON'>

const NEWLINE = Buffer.from('\n')
const EOF = Buffer.from('# EOF\n')
/**
 * Longest run of scrape work (rendering, and the caller's writes of what was rendered) before
 * the event loop gets a turn: a chunk waits up to one slice behind a scrape, and cadence is what
 * tokentap measures (the A/B behind 1 ms: bench/results/ab-notes.md).
 */
const SLICE_MS = 1
/**
 * Scrapes less than this apart serve the same collection of prom-client's process metrics, which
 * cost as much as the rest of a large scrape (bench/results/ab-notes.md); Prometheus's own
 * interval still collects afresh every time.
 */
const PROCESS_MAX_AGE_MS = 1000
/** Bytes handed to the caller at a time (one socket write, one chunk of the body). */
export const BATCH_BYTES = 128 * 1024
/** Batch buffers kept free between scrapes (2 MiB); a bigger scrape in flight allocates more. */
const BATCHES_KEPT = 16

/**
 * Each scrape's figures, for the benchmark's probe (bench/el-probe.ts): published only when
 * something subscribed. `ms` from the start to the last batch handed over; `work_ms` rendering
 * and copying (the caller's writes excluded); `yields` and `yield_wait_ms` the turns given to
 * the event loop and how long they took to come back; `longest_work_ms` the most work between
 * two such turns.
 */
interface ScrapeStats {
  readonly ms: number
  readonly work_ms: number
  readonly yields: number
  readonly yield_wait_ms: number
  readonly longest_work_ms: number
  readonly bytes: number
}
const scrapeChannel = channel('tokentap:scrape')

/** Lets the event loop run (I/O first) before the caller goes on. */
const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

const NON_COUNTERS_NAMED_TOTAL = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const

export class MetricsRegistry implements MetricsSource {
  /** `exposition(true)` writes OpenMetrics with exemplars. */
  readonly openMetrics = true
  readonly #process = new Registry()
  readonly #own: OwnMetric[] = []
  readonly #batches = new BatchPool(BATCH_BYTES, BATCHES_KEPT)
  /** The latest collection of the process metrics: when (monotonicNow()), in which format, its bytes. */
  #processCache: { readonly at: number; readonly format: ExpositionFormat; readonly bytes: Buffer } | undefined
  readonly #protobuf: boolean
  /** Where the process metrics come from: this process's collectors, or another registry (the cluster primary's sum of its group). */
  readonly #processSource: () => Promise<ProcessSource>
  readonly #processMaxAge: number

  /**
   * `protobuf`: serve the protobuf exposition (native histograms on). `processSource`: serve this
   * registry's process metrics (made anew for each collection) in place of this process's own.
   */
  constructor(opts: { processMetrics: boolean; protobuf?: boolean; processSource?: () => Promise<ProcessSource> }) {
    this.#protobuf = opts.protobuf === true
    this.#processSource = opts.processSource ?? (async () => this.#process)
    // Figures from elsewhere were collected for this scrape: nothing to save by keeping them.
    this.#processMaxAge = opts.processSource === undefined ? PROCESS_MAX_AGE_MS : 0
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

  /** The own families, in exposition order (a cluster worker sends their state to the primary). */
  get families(): readonly OwnMetric[] {
    return this.#own
  }

  /** prom-client's process metrics in the JSON form (a cluster worker's, which the primary sums). */
  async processJson(): Promise<MetricJson[]> {
    return (await this.#process.getMetricsAsJSON()) as unknown as MetricJson[]
  }

  /**
   * The whole exposition as one string: what an app that embeds the plugin serves on a route of
   * its own (`reply.type(PROMETHEUS_CONTENT_TYPE).send(await app.tokentap.registry.text())`).
   */
  async text(openMetrics = false): Promise<string> {
    const batches: Buffer[][] = []
    for await (const batch of this.exposition(openMetrics)) batches.push(batch)
    const text = Buffer.concat(batches.flat()).toString('utf8')
    // Read into the string: the buffers can take the next scrape.
    for (const batch of batches) this.recycle(batch)
    return text
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
  exposition(openMetrics = false): AsyncGenerator<Buffer[]> {
    return this.#stream(openMetrics ? 'openmetrics' : 'text')
  }

  /**
   * The protobuf exposition (delimited MetricFamily messages: native histograms with their
   * classic buckets), streamed in the same slices and batches as the text formats. Undefined
   * when native histograms are off: such a registry serves the text formats only.
   */
  get protobuf(): (() => AsyncGenerator<Buffer[]>) | undefined {
    return this.#protobuf ? () => this.#stream('protobuf') : undefined
  }

  async *#stream(format: ExpositionFormat): AsyncGenerator<Buffer[]> {
    const openMetrics = format === 'openmetrics'
    const start = monotonicNow()
    // The slice starts before the process metrics: collected anew, they take a millisecond or two.
    let slice = start
    let resumed = start
    let work = 0
    let sliceWork = 0
    let longest = 0
    let yields = 0
    let waited = 0
    let bytes = 0
    // prom-client's process metrics first, all at once (a few dozen samples), and sent last:
    // counted before the scrape's own yields, they never see its pending setImmediate
    // (nodejs_active_resources{type="Immediate"}) nor its writes.
    const processText = await this.#processBytes(format, start)
    const out = this.#batches.batches()
    // Time spent in here, not in the caller's writes of what was handed over.
    let handedAt = start
    const handOver = (batch: Buffer[]): Buffer[] => {
      const at = monotonicNow()
      handedAt = at
      sliceWork += at - resumed
      for (const b of batch) bytes += b.length
      return batch
    }
    try {
      for (const m of this.#own) {
        for (const b of format === 'protobuf' ? m.protobufChunks() : m.chunks(openMetrics)) {
          const full = out.add(b)
          if (full !== undefined) {
            yield handOver(full)
            resumed = monotonicNow()
          }
          if (monotonicNow() - slice > SLICE_MS) {
            if (out.pending > 0) {
              yield handOver(out.take())
              resumed = monotonicNow()
            }
            const t = monotonicNow()
            sliceWork += t - resumed
            work += sliceWork
            if (sliceWork > longest) longest = sliceWork
            sliceWork = 0
            await yieldToLoop()
            slice = monotonicNow()
            resumed = slice
            yields++
            waited += slice - t
          }
        }
        // OpenMetrics allows no blank lines between families.
        if (format === 'text') out.add(NEWLINE)
      }
      const last = out.add(processText)
      if (last !== undefined) {
        yield handOver(last)
        resumed = monotonicNow()
      }
      if (openMetrics) out.add(EOF)
      if (out.pending > 0) yield handOver(out.take())
      else sliceWork += monotonicNow() - resumed
      work += sliceWork
      if (sliceWork > longest) longest = sliceWork
      if (scrapeChannel.hasSubscribers) {
        const stats: ScrapeStats = { ms: handedAt - start, work_ms: work, yields, yield_wait_ms: waited, longest_work_ms: longest, bytes }
        scrapeChannel.publish(stats)
      }
    } finally {
      out.close()
    }
  }

  /** prom-client's process metrics in this format: a collection less than `PROCESS_MAX_AGE_MS` old, or a new one. */
  async #processBytes(format: ExpositionFormat, now: number): Promise<Buffer> {
    const c = this.#processCache
    if (c !== undefined && c.format === format && now - c.at < this.#processMaxAge) return c.bytes
    let bytes: Buffer
    const source = await this.#processSource()
    if (format === 'text') bytes = Buffer.from(await source.metrics())
    else {
      const json = (await source.getMetricsAsJSON()) as unknown as PromClientMetric[]
      bytes = format === 'protobuf' ? promClientToProtobuf(json) : Buffer.from(promClientToOpenMetrics(json))
    }
    this.#processCache = { at: now, format, bytes }
    return bytes
  }

  /** The caller wrote these batches: their buffers can hold the next scrape's. */
  recycle(batch: readonly Buffer[]): void {
    this.#batches.recycle(batch)
  }
}
