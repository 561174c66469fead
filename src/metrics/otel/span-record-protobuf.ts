import {
  NotWritten,
  SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK,
  SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK,
  Writer,
  count,
  writeAttributes,
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
  w.byte(0x0a)
  w.hexId(r.traceId)
  w.byte(0x12)
  w.hexId(r.spanId)
  if (parent !== undefined && parent.spanId !== '') {
    w.byte(0x22)
    w.hexId(parent.spanId)
  }
  w.byte(0x2a)
  w.string(r.name)
  count(w, 0x30, KIND_CLIENT)
  w.byte(0x39)
  w.millis(r.startMs)
  w.byte(0x41)
  w.millis(r.endMs)
  writeAttributes(w, r.attributes, 0x4a)
  count(w, 0x50, 0)
  for (const event of r.events) {
    w.byte(0x5a)
    const e = w.start()
    w.byte(0x09)
    w.millis(event.timeMs)
    w.byte(0x12)
    w.string(event.name)
    if (event.attributes !== undefined) writeAttributes(w, event.attributes, 0x1a)
    count(w, 0x20, 0)
    w.finish(e)
  }
  count(w, 0x60, 0)
  count(w, 0x70, 0)
  w.byte(0x7a)
  const status = w.start()
  if (r.statusMessage) {
    w.byte(0x12)
    w.string(r.statusMessage)
  }
  count(w, 0x18, r.status)
  w.finish(status)
  w.byte(0x85)
  w.byte(0x01)
  let flags = SAMPLED | SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
  if (parent?.remote === true) flags |= SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
  w.fixed32(flags)
  w.finish(at)
}

/**
 * Kept spans on their way to the export's thread: each written as it is added, the records the SDK
 * must read kept as they are. `take` hands over what was added since the last take.
 */
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
