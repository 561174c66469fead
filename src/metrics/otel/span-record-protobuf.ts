import {
  NotWritten,
  Writer,
  count,
  nanosOf,
  secondsOf,
  writeAttributes,
  writeEvent,
  writeSpanHead,
  writeSpanTail,
} from './protobuf-writer.ts'
import type { SpanRecord } from './span-export.ts'

/**
 * A kept span's OTLP `Span` message, written by the main thread when its request ends, from its
 * record: the bytes the SDK's `ProtobufTraceSerializer` writes for the ReadableSpan SpanExport
 * builds from the same record (span-export.ts), tests compare them. The export's thread then only
 * copies them into a request (span-protobuf.ts's EncodedSpan): no structured clone of the record's
 * keys, no SDK objects, no second pass (docs/performance.md, "Spans: what tracing costs").
 * https://github.com/open-telemetry/opentelemetry-proto/blob/v1.7.0/opentelemetry/proto/trace/v1/trace.proto
 */

/** The API's SpanKind.CLIENT (2), plus one: OTLP's 0 is "unspecified". */
const KIND_CLIENT = 3
/** TraceFlags.SAMPLED: every exported span is sampled. */
const SAMPLED = 1

/**
 * ScopeSpans' field 2 (tag, length, `Span`) for this record. Throws NotWritten, having written
 * part of it, for a record the SDK must read: a caller's tracestate (the SDK's TraceState
 * parses and rewrites it) or an attribute value that is not a string, number or boolean.
 */
export function writeSpanRecord(w: Writer, r: SpanRecord): void {
  const parent = r.parent
  if (parent?.traceState !== undefined) throw new NotWritten()
  w.byte(0x12)
  const at = w.start()
  writeSpanHead(w, r.traceId, r.spanId, undefined, parent?.spanId, r.name, KIND_CLIENT)
  w.byte(0x39)
  w.millis(r.startMs)
  w.byte(0x41)
  w.millis(r.endMs)
  writeAttributes(w, r.attributes, 0x4a)
  count(w, 0x50, 0)
  for (const event of r.events) {
    w.byte(0x5a)
    writeEvent(w, secondsOf(event.timeMs), nanosOf(event.timeMs), event.name, event.attributes, 0)
  }
  writeSpanTail(w, 0, 0, r.statusMessage, r.status, SAMPLED, parent?.remote === true)
  w.finish(at)
}

/** The batch buffer's size: 64 spans of ≈ 1 KiB. */
const BATCH_BYTES = 64 * 1024
/** A buffer grown past this by a batch of large spans is let go after it is taken. */
const MAX_KEPT_BYTES = 1024 * 1024

export class SpanBatch {
  #writer = new Writer(BATCH_BYTES)
  #records: SpanRecord[] = []
  #spans = 0

  /** Spans added since the last take. */
  get size(): number {
    return this.#spans
  }

  add(r: SpanRecord): void {
    const mark = this.#writer.pos
    try {
      writeSpanRecord(this.#writer, r)
    } catch {
      // NotWritten, or anything else the writer could not do (a buffer it could not grow): the
      // record goes over as it is, for the SDK to write, and the request's other sinks still run.
      this.#writer.pos = mark
      this.#records.push(r)
    }
    this.#spans++
  }

  /** The written spans' bytes (a buffer of their own, to transfer) and the records, then empty. */
  take(): { readonly bytes: Uint8Array<ArrayBuffer> | undefined; readonly records: SpanRecord[] } {
    const w = this.#writer
    const bytes = w.pos === 0 ? undefined : w.buf.slice(0, w.pos)
    const records = this.#records
    w.pos = 0
    if (w.buf.length > MAX_KEPT_BYTES) this.#writer = new Writer(BATCH_BYTES)
    this.#records = []
    this.#spans = 0
    return { bytes, records }
  }
}
