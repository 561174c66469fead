import type { Attributes, SpanStatusCode } from '@opentelemetry/api'
import {
  NotWritten,
  Writer,
  count,
  nanosOf,
  secondsOf,
  writeAttributes,
  writeBooleanKeyValue,
  writeNumberKeyValue,
  writeSpanHead,
  writeSpanTail,
  writeStringKeyValue,
} from './protobuf-writer.ts'
import type { AttributeKey } from './protobuf-writer.ts'
import type { SpanHead, SpanRecord } from './span-export.ts'
import { recordOf } from './span-out.ts'
import type { SpanDescription, SpanOut } from './span-out.ts'

/**
 * A kept span's OTLP `Span` message, written by the main thread when its request ends: the bytes
 * the SDK's `ProtobufTraceSerializer` writes for the ReadableSpan SpanExport builds from the same
 * span's record (span-export.ts), tests compare them. A request's span is told to the writer
 * straight from the request's figures (request-span.ts), with no object built for its
 * attributes; a realtime span comes as its record. The export's thread then only copies the bytes
 * into a request (span-protobuf.ts's EncodedSpan): no structured clone, no SDK objects, no second
 * pass (docs/performance.md, "Spans: what tracing costs").
 * https://github.com/open-telemetry/opentelemetry-proto/blob/v1.7.0/opentelemetry/proto/trace/v1/trace.proto
 */

/** The API's SpanKind.CLIENT (2), plus one: OTLP's 0 is "unspecified". */
const KIND_CLIENT = 3
/** TraceFlags.SAMPLED: every exported span is sampled. */
const SAMPLED = 1
/** `Span.attributes` and `Span.Event.attributes`. */
const SPAN_ATTRIBUTE = 0x4a
const EVENT_ATTRIBUTE = 0x1a
/** No field open. */
const NONE = -1

/**
 * ScopeSpans' field 2 (tag, length, `Span`) of the span told to it. Throws NotWritten, having
 * written part of it, for a span the SDK must read: a caller's tracestate (the SDK's TraceState
 * parses and rewrites it) or a value it does not write.
 */
export class SpanWriter implements SpanOut {
  w: Writer
  /** Where the span's length goes, and the open event's. */
  #span = NONE
  #event = NONE
  #tag = SPAN_ATTRIBUTE
  #remoteParent = false

  constructor(w: Writer) {
    this.w = w
  }

  begin(head: SpanHead): void {
    const parent = head.parent
    if (parent?.traceState !== undefined) throw new NotWritten()
    const w = this.w
    w.byte(0x12)
    this.#span = w.start()
    this.#event = NONE
    this.#tag = SPAN_ATTRIBUTE
    this.#remoteParent = parent?.remote === true
    writeSpanHead(w, head.traceId, head.spanId, undefined, parent?.spanId, head.name, KIND_CLIENT)
    w.byte(0x39)
    w.millis(head.startMs)
    w.byte(0x41)
    w.millis(head.endMs)
  }

  string(key: AttributeKey, value: string): void {
    writeStringKeyValue(this.w, this.#tag, key.field, value)
  }

  number(key: AttributeKey, value: number): void {
    writeNumberKeyValue(this.w, this.#tag, key.field, value)
  }

  boolean(key: AttributeKey, value: boolean): void {
    writeBooleanKeyValue(this.w, this.#tag, key.field, value)
  }

  /** A record's attributes, in for-in order. */
  attributes(attributes: Attributes): void {
    writeAttributes(this.w, attributes, this.#tag)
  }

  event(name: string, timeMs: number): void {
    const w = this.w
    this.#closeAttributes()
    w.byte(0x5a)
    this.#event = w.start()
    w.byte(0x09)
    w.time(secondsOf(timeMs), nanosOf(timeMs))
    w.byte(0x12)
    w.string(name)
    this.#tag = EVENT_ATTRIBUTE
  }

  end(status: SpanStatusCode, statusMessage: string | undefined): void {
    this.#closeAttributes()
    writeSpanTail(this.w, 0, 0, statusMessage, status, SAMPLED, this.#remoteParent)
    this.w.finish(this.#span)
    this.#span = NONE
  }

  /** The dropped-attributes count after the span's attributes (field 10) or the open event's (its field 4), which it ends. */
  #closeAttributes(): void {
    if (this.#event === NONE) count(this.w, 0x50, 0)
    else {
      count(this.w, 0x20, 0)
      this.w.finish(this.#event)
    }
  }
}

/** A record's span, as `SpanWriter` writes it. */
export function writeSpanRecord(w: Writer, r: SpanRecord): void {
  const out = new SpanWriter(w)
  out.begin(r)
  out.attributes(r.attributes)
  for (const event of r.events) {
    out.event(event.name, event.timeMs)
    if (event.attributes) out.attributes(event.attributes)
  }
  out.end(r.status, r.statusMessage)
}

/** The batch buffer's size: 64 spans of ≈ 1 KiB. */
const BATCH_BYTES = 64 * 1024
/** A buffer grown past this by a batch of large spans is let go after it is taken. */
const MAX_KEPT_BYTES = 1024 * 1024

export class SpanBatch {
  #writer = new Writer(BATCH_BYTES)
  readonly #out = new SpanWriter(this.#writer)
  #records: SpanRecord[] = []
  #spans = 0

  /** Spans added since the last take. */
  get size(): number {
    return this.#spans
  }

  /** A span told from its figures (request-span.ts). */
  write(describe: SpanDescription): void {
    const mark = this.#writer.pos
    try {
      describe(this.#out)
    } catch {
      // NotWritten, or anything else the writer could not do (a buffer it could not grow): the
      // span goes over as its record, for the SDK to write, and the request's other sinks still run.
      this.#writer.pos = mark
      this.#records.push(recordOf(describe))
    }
    this.#spans++
  }

  /** A span as its record (test/metrics/span-protobuf.test.ts writes records both ways and compares the bytes). */
  add(r: SpanRecord): void {
    const mark = this.#writer.pos
    try {
      writeSpanRecord(this.#writer, r)
    } catch {
      // As in `write`: the record goes over as it is.
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
    if (w.buf.length > MAX_KEPT_BYTES) {
      this.#writer = new Writer(BATCH_BYTES)
      this.#out.w = this.#writer
    }
    this.#records = []
    this.#spans = 0
    return { bytes, records }
  }
}
