/**
 * The few protobuf encodings the Prometheus exposition needs (https://protobuf.dev/programming-guides/encoding/),
 * hand-written so a scrape encodes straight into bytes with no message objects (DEVELOPING.md); the tests decode
 * every output with protobufjs and the official `metrics.proto`. Varints are exact up to 2^53.
 */

const WIRE_VARINT = 0
const WIRE_FIXED64 = 1
const WIRE_LEN = 2

/** A double's bytes, little-endian on every platform Node runs on (checked below). */
const F64 = new Float64Array(1)
const F64_BYTES = new Uint8Array(F64.buffer)
F64[0] = 1
if (F64_BYTES[7] !== 0x3f) throw new Error('protobuf-writer: a big-endian platform needs writeDoubleLE')

export class ProtoWriter {
  #buf: Buffer
  #pos = 0
  /** Where each open nested message's one-byte length placeholder is. */
  readonly #open: number[] = []

  constructor(size = 4096) {
    this.#buf = Buffer.allocUnsafe(size)
  }

  get length(): number {
    return this.#pos
  }

  #reserve(n: number): void {
    const need = this.#pos + n
    if (need <= this.#buf.length) return
    const next = Buffer.allocUnsafe(Math.max(need, this.#buf.length * 2))
    this.#buf.copy(next, 0, 0, this.#pos)
    this.#buf = next
  }

  /** A varint of a non-negative integer (up to 2^53). */
  varint(n: number): void {
    this.#reserve(10)
    const buf = this.#buf
    let p = this.#pos
    if (n < 0x80) {
      buf[p] = n
      this.#pos = p + 1
      return
    }
    while (n >= 0x80) {
      buf[p++] = (n % 0x80) | 0x80
      n = Math.floor(n / 0x80)
    }
    buf[p++] = n
    this.#pos = p
  }

  tag(field: number, wire: number): void {
    this.varint(field * 8 + wire)
  }

  /** A uint64 / uint32 / enum field. */
  uint(field: number, n: number): void {
    this.tag(field, WIRE_VARINT)
    this.varint(n)
  }

  /** A sint32 / sint64 field (zigzag). */
  sint(field: number, n: number): void {
    this.tag(field, WIRE_VARINT)
    this.varint(zigzag(n))
  }

  double(field: number, n: number): void {
    this.tag(field, WIRE_FIXED64)
    this.rawDouble(n)
  }

  /** A double without its tag (inside a packed field): its 8 bytes through a shared Float64Array. */
  rawDouble(n: number): void {
    this.#reserve(8)
    F64[0] = n
    this.#buf.set(F64_BYTES, this.#pos)
    this.#pos += 8
  }

  /** A zigzag varint without its tag (inside a packed field). */
  rawSint(n: number): void {
    this.varint(zigzag(n))
  }

  string(field: number, s: string): void {
    this.tag(field, WIRE_LEN)
    const n = Buffer.byteLength(s)
    this.varint(n)
    this.#reserve(n)
    this.#buf.write(s, this.#pos, n, 'utf8')
    this.#pos += n
  }

  /** Bytes already encoded (a cached message, with its own tag and length). */
  bytes(src: Uint8Array): void {
    this.#reserve(src.length)
    this.#buf.set(src, this.#pos)
    this.#pos += src.length
  }

  /** Opens a length-delimited field (a nested message or a packed repeated field); `end()` closes it. */
  begin(field: number): void {
    this.tag(field, WIRE_LEN)
    this.#reserve(1)
    this.#open.push(this.#pos)
    this.#pos++
  }

  /** Closes the innermost `begin()`: its length is written, the content moved when it needs more than one byte. */
  end(): void {
    const at = this.#open.pop() as number
    const len = this.#pos - at - 1
    if (len < 0x80) {
      this.#buf[at] = len
      return
    }
    const size = varintSize(len)
    this.#reserve(size - 1)
    this.#buf.copyWithin(at + size, at + 1, this.#pos)
    this.#pos += size - 1
    let p = at
    let n = len
    while (n >= 0x80) {
      this.#buf[p++] = (n % 0x80) | 0x80
      n = Math.floor(n / 0x80)
    }
    this.#buf[p] = n
  }

  /** A copy of what was written, and the writer emptied for the next message. */
  take(): Buffer {
    const out = Buffer.from(this.#buf.subarray(0, this.#pos))
    this.#pos = 0
    this.#open.length = 0
    return out
  }
}

/** ZigZag of an integer in JavaScript's safe range (no 32-bit shifts: deltas may pass 2^31). */
const zigzag = (n: number): number => (n >= 0 ? 2 * n : -2 * n - 1)

/** Bytes of the varint of `n`. */
function varintSize(n: number): number {
  let size = 1
  while (n >= 0x80) {
    n = Math.floor(n / 0x80)
    size++
  }
  return size
}

/** The varint of `n` alone (a delimited message's length prefix). */
export function varintBytes(n: number): Buffer {
  const out = Buffer.allocUnsafe(varintSize(n))
  let p = 0
  while (n >= 0x80) {
    out[p++] = (n % 0x80) | 0x80
    n = Math.floor(n / 0x80)
  }
  out[p] = n
  return out
}
