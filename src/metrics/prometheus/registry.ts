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

/** What `/metrics` serves in one process: tokentap's own families (cached bytes per series) and prom-client's process metrics. */

export type OwnMetric = Histogram | Counter | CollectedGauge

/** What process metrics are read from: a prom-client registry. */
export type ProcessSource = Pick<Registry, 'metrics' | 'getMetricsAsJSON'>

const NEWLINE = Buffer.from('\n')
const EOF = Buffer.from('# EOF\n')
/** Longest run of scrape work before the event loop gets a turn, so a proxied chunk waits at most one slice (bench/results/ab-notes.md). */
const SLICE_MS = 1
/** Scrapes closer than this share one collection of prom-client's process metrics, as costly as a large scrape (bench/results/ab-notes.md). */
const PROCESS_MAX_AGE_MS = 1000
/** Bytes handed to the caller at a time (one socket write, one chunk of the body). */
export const BATCH_BYTES = 128 * 1024
/** Batch buffers kept free between scrapes (2 MiB); a bigger scrape in flight allocates more. */
const BATCHES_KEPT = 16

/** Each scrape's figures for the benchmark's probe (bench/el-probe.ts), published only when something subscribed. */
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

const NON_COUNTERS_NAMED_TOTAL = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
] as const

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

  /** `protobuf`: serve the protobuf exposition; `processSource`: process metrics from this registry instead of this process's own. */
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

  /** The whole exposition as one string, for an app that embeds the plugin and serves it on its own route. */
  async text(openMetrics = false): Promise<string> {
    const batches: Buffer[][] = []
    for await (const batch of this.exposition(openMetrics)) batches.push(batch)
    const text = Buffer.concat(batches.flat()).toString('utf8')
    // Read into the string: the buffers can take the next scrape.
    for (const batch of batches) this.recycle(batch)
    return text
  }

  /**
   * Prometheus text 0.0.4 or OpenMetrics 1.0, in batches of about `BATCH_BYTES`: each series as it was at one instant,
   * with at most `SLICE_MS` of work (the caller's writes included) between turns of the event loop.
   */
  exposition(openMetrics = false): AsyncGenerator<Buffer[]> {
    return this.#stream(openMetrics ? 'openmetrics' : 'text')
  }

  /** The protobuf exposition (delimited MetricFamily messages), streamed like the text; undefined with native histograms off. */
  get protobuf(): (() => AsyncGenerator<Buffer[]>) | undefined {
    return this.#protobuf ? () => this.#stream('protobuf') : undefined
  }

  async *#stream(format: ExpositionFormat): AsyncGenerator<Buffer[]> {
    const openMetrics = format === 'openmetrics'
    const start = monotonicNow()
    let slice = start
    let resumed = start
    let work = 0
    let sliceWork = 0
    let longest = 0
    let yields = 0
    let waited = 0
    let bytes = 0
    // Process metrics are collected before the scrape yields, so they never count its own setImmediate or writes.
    const processText = await this.#processBytes(format, start)
    const out = this.#batches.batches()
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
        const stats: ScrapeStats = {
          ms: handedAt - start,
          work_ms: work,
          yields,
          yield_wait_ms: waited,
          longest_work_ms: longest,
          bytes,
        }
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
