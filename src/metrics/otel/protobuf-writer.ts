import type { Attributes, HrTime } from '@opentelemetry/api'

/**
 * The protobuf writer of tokentap's OTLP spans, shared by the main thread, which writes each kept
 * span's `Span` message when its request ends (span-record-protobuf.ts), and the export's thread,
 * which writes the `ExportTraceServiceRequest` around them (span-protobuf.ts). Types only from
 * OpenTelemetry: the main thread loads none of its packages. Every field is written as the SDK's
 * `ProtobufTraceSerializer` writes it (`@opentelemetry/otlp-transformer` 0.223.0,
 * common-serializer.js: the same varints, fixed64s and string encodings); tests compare the bytes.
 */

/** A span or value the fast path does not write: the whole request goes to the SDK's serialiser. */
export class NotWritten extends Error {}

const ENCODER = new TextEncoder()
/** Attribute keys' encoded `KeyValue.key` fields; keys are few (tokentap's own and the resource's), bounded anyway. */
const KEY_CACHE_LIMIT = 1024
const keyBytes = new Map<string, Uint8Array>()

const SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK = 0x100
const SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK = 0x200
const MIN_64_BIT_INT = -(2 ** 63)
const MAX_64_BIT_INT = 2 ** 63

export class Writer {
  /**
   * V8's optimised code holds the object shapes it was compiled for weakly, and a full GC that
   * finds none of a shape alive throws that code away ("weak objects" under `--trace-deopt`): a
   * writer lives for one export, so the idle GC between two exports threw the serialiser's
   * compiled code away and each export compiled it again. One writer kept for the process keeps
   * the shape alive (docs/performance.md, "Spans"; test/metrics/otel-span-shapes.test.ts).
   */
  static readonly #kept: Writer[] = []
  static {
    Writer.#kept.push(new Writer(16))
  }

  buf: Uint8Array<ArrayBuffer>
  view: DataView
  pos = 0

  constructor(size: number) {
    this.buf = new Uint8Array(size)
    this.view = new DataView(this.buf.buffer)
  }

  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.pos + n))
    next.set(this.buf.subarray(0, this.pos))
    this.buf = next
    this.view = new DataView(next.buffer)
  }

  /** A single byte: every tag tokentap writes but the span's flags (16) fits in one. */
  byte(b: number): void {
    this.ensure(1)
    this.buf[this.pos++] = b
  }

  /** 0 ≤ v ≤ 0xffffffff. */
  varint32(v: number): void {
    this.ensure(5)
    let x = v >>> 0
    const b = this.buf
    while (x > 0x7f) {
      b[this.pos++] = (x & 0x7f) | 0x80
      x >>>= 7
    }
    b[this.pos++] = x
  }

  /** Any integer in int64's range, as the SDK's writeVarint (two's complement below 0). */
  varint(value: number): void {
    if (value >= 0 && value <= 0xffffffff) {
      this.varint32(value)
      return
    }
    this.ensure(10)
    let low: number
    let high: number
    if (value >= 0) {
      low = value >>> 0
      high = (value / 0x100000000) >>> 0
    } else {
      const abs = Math.abs(value)
      low = ~(abs >>> 0) >>> 0
      high = ~((abs / 0x100000000) >>> 0) >>> 0
      low = (low + 1) >>> 0
      if (low === 0) high = (high + 1) >>> 0
    }
    const b = this.buf
    while (high > 0 || low > 0x7f) {
      b[this.pos++] = (low & 0x7f) | 0x80
      low = ((low >>> 7) | (high << 25)) >>> 0
      high >>>= 7
    }
    b[this.pos++] = low & 0x7f
  }

  fixed32(v: number): void {
    this.ensure(4)
    this.view.setUint32(this.pos, v >>> 0, true)
    this.pos += 4
  }

  hrTime(t: HrTime): void {
    this.time(t[0], t[1])
  }

  /** Epoch ms as the SDK's `millisToHrTime` turns them into [seconds, nanoseconds], then as `hrTime`. */
  millis(ms: number): void {
    this.time(secondsOf(ms), nanosOf(ms))
  }

  /** The SDK's writeHrTimeAsFixed64: [seconds, nanoseconds] as nanoseconds, every product exact. */
  time(seconds: number, nanos: number): void {
    const lower16 = (seconds & 0xffff) * 1_000_000_000
    const upper = ((seconds / 0x10000) >>> 0) * 1_000_000_000
    const lowWithCarry = (lower16 >>> 0) + ((((upper & 0xffff) * 0x10000) >>> 0) + nanos)
    const high =
      (Math.floor(lower16 / 0x100000000) + ((upper / 0x10000) >>> 0) + Math.floor(lowWithCarry / 0x100000000)) >>> 0
    this.ensure(8)
    this.view.setUint32(this.pos, lowWithCarry >>> 0, true)
    this.view.setUint32(this.pos + 4, high, true)
    this.pos += 8
  }

  double(v: number): void {
    this.ensure(8)
    this.view.setFloat64(this.pos, v, true)
    this.pos += 8
  }

  /** A string field's length and bytes: ASCII byte by byte, anything else through TextEncoder (as the SDK). */
  string(s: string): void {
    const n = s.length
    this.ensure(n + 5)
    const start = this.pos
    this.varint32(n)
    const b = this.buf
    let p = this.pos
    for (let i = 0; i < n; i++) {
      const c = s.charCodeAt(i)
      if (c > 127) {
        this.pos = start
        this.bytes(ENCODER.encode(s))
        return
      }
      b[p++] = c
    }
    this.pos = p
  }

  /** Bytes already encoded, as they are. */
  raw(bytes: Uint8Array): void {
    this.ensure(bytes.length)
    this.buf.set(bytes, this.pos)
    this.pos += bytes.length
  }

  bytes(bytes: Uint8Array): void {
    this.varint32(bytes.length)
    this.ensure(bytes.length)
    this.buf.set(bytes, this.pos)
    this.pos += bytes.length
  }

  /** A trace or span id's bytes from its hex digits (the SDK's hexToBinary, without the array). */
  hexId(hex: string): void {
    const n = hex.length
    if (n % 2 !== 0) throw new NotWritten()
    this.varint32(n / 2)
    this.ensure(n / 2)
    const b = this.buf
    for (let i = 0; i < n; i += 2) b[this.pos++] = (hexValue(hex.charCodeAt(i)) << 4) | hexValue(hex.charCodeAt(i + 1))
  }

  /** A length-delimited field's start: one byte kept for its length (most are under 128). */
  start(): number {
    this.ensure(1)
    return this.pos++
  }

  /** Writes the length at `at`, moving the content when it needs more than the byte kept. */
  finish(at: number): void {
    const length = this.pos - at - 1
    if (length < 0x80) {
      this.buf[at] = length
      return
    }
    const size = varintSize(length)
    this.ensure(size - 1)
    this.buf.copyWithin(at + size, at + 1, this.pos)
    this.pos += size - 1
    const end = this.pos
    this.pos = at
    this.varint32(length)
    this.pos = end
  }
}

/** Epoch ms' whole seconds, as the SDK's `millisToHrTime`. */
export const secondsOf = (ms: number): number => Math.trunc(ms / 1000)
/** Epoch ms' nanoseconds past the second, rounded, as the SDK's `millisToHrTime`. */
export const nanosOf = (ms: number): number => Math.round((ms % 1000) * 1_000_000)

/** The SDK's intValue: 0-9, a-f, and A-F by `c - 55`. */
function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48
  if (c >= 97 && c <= 102) return c - 87
  return c - 55
}

function varintSize(v: number): number {
  if (v < 0x80) return 1
  if (v < 0x4000) return 2
  if (v < 0x200000) return 3
  if (v < 0x10000000) return 4
  return 5
}

/** `KeyValue.key`'s tag, length and bytes, encoded once per key. */
function keyField(key: string): Uint8Array {
  let bytes = keyBytes.get(key)
  if (bytes !== undefined) return bytes
  const w = new Writer(key.length + 6)
  w.byte(0x0a)
  w.string(key)
  bytes = w.buf.slice(0, w.pos)
  if (keyBytes.size < KEY_CACHE_LIMIT) keyBytes.set(key, bytes)
  return bytes
}

/** An attribute's key and its encoded `KeyValue.key` field, made once where the key is a constant. */
export interface AttributeKey {
  readonly name: string
  readonly field: Uint8Array
}

export function attributeKey(name: string): AttributeKey {
  return { name, field: keyField(name) }
}

/**
 * A KeyValue's start: its tag (`tag`, one byte: field and wire type 2), a byte kept for its length,
 * the key, the value's tag and a byte kept for the AnyValue's length, in one reservation. Returns
 * where the AnyValue's length goes; `closeKeyValue` ends both.
 */
function openKeyValue(w: Writer, tag: number, key: Uint8Array): number {
  const n = key.length
  w.ensure(n + 4)
  const b = w.buf
  let p = w.pos
  b[p++] = tag
  p++
  b.set(key, p)
  p += n
  b[p++] = 0x12
  const any = p++
  w.pos = p
  return any
}

function closeKeyValue(w: Writer, any: number, key: Uint8Array): void {
  w.finish(any)
  w.finish(any - key.length - 2)
}

export function writeStringKeyValue(w: Writer, tag: number, key: Uint8Array, value: string): void {
  const any = openKeyValue(w, tag, key)
  w.byte(0x0a)
  w.string(value)
  closeKeyValue(w, any, key)
}

/** As the SDK's toAnyValue: an integer in int64's range as `int_value`, anything else as `double_value`. */
export function writeNumberKeyValue(w: Writer, tag: number, key: Uint8Array, value: number): void {
  const any = openKeyValue(w, tag, key)
  if (Number.isInteger(value) && value >= MIN_64_BIT_INT && value < MAX_64_BIT_INT) {
    w.byte(0x18)
    w.varint(value)
  } else {
    w.byte(0x21)
    w.double(value)
  }
  closeKeyValue(w, any, key)
}

export function writeBooleanKeyValue(w: Writer, tag: number, key: Uint8Array, value: boolean): void {
  const any = openKeyValue(w, tag, key)
  w.byte(0x10)
  w.byte(value ? 1 : 0)
  closeKeyValue(w, any, key)
}

/** `tag` (one byte: field and wire type 2) and one KeyValue per own attribute, in for-in order as the SDK. */
export function writeAttributes(w: Writer, attributes: Attributes, tag: number): void {
  for (const key in attributes) {
    if (!Object.hasOwn(attributes, key)) continue
    const value = attributes[key]
    if (typeof value === 'string') writeStringKeyValue(w, tag, keyField(key), value)
    else if (typeof value === 'number') writeNumberKeyValue(w, tag, keyField(key), value)
    else if (typeof value === 'boolean') writeBooleanKeyValue(w, tag, keyField(key), value)
    else throw new NotWritten()
  }
}

/** A `uint32` count the SDK writes with writeVarint (it must be one). */
export function count(w: Writer, tag: number, n: number): void {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new NotWritten()
  w.byte(tag)
  w.varint32(n)
}

/**
 * A `Span`'s fields 1 to 6, as the SDK writes them: its ids, the tracestate and the parent's span
 * id when there are, its name, and its kind (OTLP's: the API's plus one; 0 is not written).
 */
export function writeSpanHead(
  w: Writer,
  traceId: string,
  spanId: string,
  traceState: string | undefined,
  parentSpanId: string | undefined,
  name: string,
  kind: number,
): void {
  w.byte(0x0a)
  w.hexId(traceId)
  w.byte(0x12)
  w.hexId(spanId)
  if (traceState) {
    w.byte(0x1a)
    w.string(traceState)
  }
  if (parentSpanId) {
    w.byte(0x22)
    w.hexId(parentSpanId)
  }
  w.byte(0x2a)
  w.string(name)
  if (kind !== 0) count(w, 0x30, kind)
}

/** A `Span.Event` (field 11's content, after its tag): its time, name, attributes and the count dropped. */
export function writeEvent(
  w: Writer,
  seconds: number,
  nanos: number,
  name: string,
  attributes: Attributes | undefined,
  dropped: number,
): void {
  const at = w.start()
  w.byte(0x09)
  w.time(seconds, nanos)
  w.byte(0x12)
  w.string(name)
  if (attributes) writeAttributes(w, attributes, 0x1a)
  count(w, 0x20, dropped)
  w.finish(at)
}

/**
 * A `Span`'s fields after its events: the counts of events and links dropped, the status, and
 * the flags (field 16, fixed32: the trace flags and whether the parent is remote, always set).
 */
export function writeSpanTail(
  w: Writer,
  droppedEvents: number,
  droppedLinks: number,
  statusMessage: string | undefined,
  statusCode: number,
  traceFlags: number,
  remoteParent: boolean,
): void {
  count(w, 0x60, droppedEvents)
  count(w, 0x70, droppedLinks)
  w.byte(0x7a)
  const status = w.start()
  if (statusMessage) {
    w.byte(0x12)
    w.string(statusMessage)
  }
  count(w, 0x18, statusCode)
  w.finish(status)
  w.byte(0x85)
  w.byte(0x01)
  let flags = (traceFlags & 0xff) | SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
  if (remoteParent) flags |= SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
  w.fixed32(flags)
}
