import { Deserializer } from 'node:v8'
import { getNumberFromEnv } from '@opentelemetry/core'
import type { SpanRecord } from './span-export.ts'
import type { SerialisedSpans } from './span-records.ts'

/**
 * Kept spans between the request that ended and their export, as bytes: the main thread
 * serialises each record when its request ends (span-records.ts) and the export's thread keeps the
 * batches it receives serialised (`SpanBacklog`) until an export is due, then builds the SDK's
 * spans and exports them at once. Records held as objects lived up to 1 s in the main thread's
 * heap and the SDK's spans up to 5 s in the export thread's, long enough to be copied by every
 * young-generation collection and promoted; the export thread then spent about 65 µs a span at the
 * default sampling against about 39 at every request sampled, when spans lived under a second
 * (docs/performance.md, "Spans: what tracing costs"). Bytes outside V8's heap cost no collection.
 */

/** The batch processor's settings, read once for it and for the backlog (the SDK's defaults and `OTEL_BSP_*`). */
export interface BatchSettings {
  readonly maxExportBatchSize: number
  readonly maxQueueSize: number
  readonly scheduledDelayMillis: number
}

/** `OTEL_BSP_*` as the SDK's BatchSpanProcessor reads them, with its defaults (a batch no larger than the queue). */
export function batchSettings(): BatchSettings {
  const maxQueueSize = positive(getNumberFromEnv('OTEL_BSP_MAX_QUEUE_SIZE'), 2048)
  const maxExportBatchSize = Math.min(positive(getNumberFromEnv('OTEL_BSP_MAX_EXPORT_BATCH_SIZE'), 512), maxQueueSize)
  const scheduledDelayMillis = positive(getNumberFromEnv('OTEL_BSP_SCHEDULE_DELAY'), 5000)
  return { maxExportBatchSize, maxQueueSize, scheduledDelayMillis }
}

const positive = (n: number | undefined, otherwise: number): number => (n !== undefined && n > 0 ? n : otherwise)

/** Where the backlog's spans go when an export is due (SpanExport). */
export interface SpanSinkForBacklog {
  add(record: SpanRecord): void
  flush(): Promise<void>
}

/**
 * The export thread's side: batches wait serialised until `maxExportBatchSize` spans are waiting or
 * `scheduledDelayMillis` has passed since the first of them (the batch processor's own rule), then
 * become the SDK's spans and are exported at once. Beyond `maxQueueSize` waiting spans a batch is
 * dropped, as the batch processor drops spans beyond its queue.
 */
export class SpanBacklog {
  readonly #sink: SpanSinkForBacklog
  readonly #settings: BatchSettings
  #batches: SerialisedSpans[] = []
  #waiting = 0
  #timer: NodeJS.Timeout | undefined
  #dropped = 0

  constructor(sink: SpanSinkForBacklog, settings: BatchSettings) {
    this.#sink = sink
    this.#settings = settings
  }

  /** Spans dropped because the queue was full (a collector slower than the spans). */
  get dropped(): number {
    return this.#dropped
  }

  push(batch: SerialisedSpans): void {
    if (batch.count === 0) return
    if (this.#waiting + batch.count > this.#settings.maxQueueSize) {
      this.#dropped += batch.count
      return
    }
    this.#batches.push(batch)
    this.#waiting += batch.count
    if (this.#waiting >= this.#settings.maxExportBatchSize) this.#exportQuietly()
    else this.#timer ??= setTimeout(() => this.#exportQuietly(), this.#settings.scheduledDelayMillis).unref()
  }

  // A failed export is reported by the exporter's wrapper (span-export.ts), once per outage.
  #exportQuietly(): void {
    this.export().catch(() => undefined)
  }

  /** Builds the waiting spans and exports them with every span handed over before; rejects as the SDK's flush does. */
  async export(): Promise<void> {
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
    const batches = this.#batches
    this.#batches = []
    this.#waiting = 0
    for (const batch of batches) {
      const d = new Deserializer(batch.records)
      d.readHeader()
      for (let i = 0; i < batch.count; i++) this.#sink.add(d.readValue() as SpanRecord)
    }
    await this.#sink.flush()
  }
}
