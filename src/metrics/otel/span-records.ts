import { Serializer } from 'node:v8'
import type { SpanRecord } from './span-export.ts'

/**
 * The main thread's half of the hand-over of kept spans: each record is serialised when its
 * request ends, so no record waits in this thread's heap for its batch, and a batch crosses to
 * the export's thread as bytes it keeps until the export (span-backlog.ts says why). No
 * OpenTelemetry module is loaded here: this runs in the proxy's thread.
 */

/** One batch as it crosses to the export's thread. */
export interface SerialisedSpans {
  readonly count: number
  readonly records: Uint8Array
}

/** Records serialised as they come (V8's structured-clone format, what postMessage writes), released as one batch. */
export class SpanRecords {
  #serializer: Serializer | undefined
  #count = 0

  get count(): number {
    return this.#count
  }

  add(record: SpanRecord): void {
    let s = this.#serializer
    if (s === undefined) {
      s = new Serializer()
      s.writeHeader()
      this.#serializer = s
    }
    s.writeValue(record)
    this.#count++
  }

  /** The batch so far (undefined when empty); the next add starts another. */
  release(): SerialisedSpans | undefined {
    const s = this.#serializer
    if (s === undefined) return undefined
    const batch = { count: this.#count, records: s.releaseBuffer() }
    this.#serializer = undefined
    this.#count = 0
    return batch
  }
}

/** The ArrayBuffer to transfer with a batch, when the batch's bytes are all of it (else the bytes are copied). */
export function transferable(batch: SerialisedSpans): ArrayBuffer[] {
  const bytes = batch.records
  const buffer = bytes.buffer
  return buffer instanceof ArrayBuffer && bytes.byteOffset === 0 && bytes.byteLength === buffer.byteLength
    ? [buffer]
    : []
}
