/**
 * Exposition lines written straight into bytes, with no intermediate string: template strings encoded with
 * `Buffer.from` were most of a scrape's CPU (bench/scrape-micro.ts). One writer serves every family, since renders
 * are synchronous and leave no bytes in it across a `yield`.
 */

import { formatValue } from './format.ts'

/** Longest `String(number)`: sign, 17 significant digits, point, `e-308`. */
export const MAX_NUMBER_BYTES = 32

class ByteWriter {
  /** The scratch buffer, or a series' store between `into()` and `done()`. */
  #buf: Buffer
  #pos = 0
  #scratch: Buffer

  constructor(size = 16 * 1024) {
    this.#scratch = Buffer.allocUnsafeSlow(size)
    this.#buf = this.#scratch
  }

  /** Makes room for `n` more bytes, which the writes below assume (a typed array drops writes past its end silently). */
  reserve(n: number): void {
    const need = this.#pos + n
    if (need <= this.#buf.length) return
    const next = Buffer.allocUnsafe(need + (need >> 3))
    this.#buf.copy(next, 0, 0, this.#pos)
    this.#buf = next
  }

  byte(b: number): void {
    this.#buf[this.#pos++] = b
  }

  /** All of `src` (`TypedArray#set` makes no view, unlike `Buffer#copy` of a part). */
  bytes(src: Uint8Array): void {
    this.#buf.set(src, this.#pos)
    this.#pos += src.length
  }

  /** A few bytes (a bucket bound): a loop costs less than a call for so few. */
  short(src: Uint8Array): void {
    const buf = this.#buf
    let p = this.#pos
    for (let i = 0; i < src.length; i++) buf[p++] = src[i]
    this.#pos = p
  }

  /** An ASCII string (what `String(number)` gives): one byte per character, room made here. */
  ascii(s: string): void {
    this.reserve(s.length)
    const buf = this.#buf
    let p = this.#pos
    for (let i = 0; i < s.length; i++) buf[p++] = s.charCodeAt(i)
    this.#pos = p
  }

  /** Any string, as UTF-8 (exemplar label values), room made here: 3 bytes per UTF-16 unit at most. */
  utf8(s: string): void {
    this.reserve(3 * s.length)
    this.#pos += this.#buf.write(s, this.#pos, 'utf8')
  }

  /** `String(v)` (what a template literal writes), the digits written directly for the integers counts are (0 … 2³² − 1). */
  number(v: number): void {
    if (v >>> 0 === v) this.#digits(v)
    else this.ascii(String(v))
  }

  /** `formatValue(v)` (format.ts: `+Inf`, `-Inf`, `NaN`, else `String(v)`), integers as digits. */
  value(v: number): void {
    if (v >>> 0 === v) this.#digits(v)
    else this.ascii(formatValue(v))
  }

  #digits(v: number): void {
    const buf = this.#buf
    let digits = 1
    for (let x = v; x >= 10; x = (x / 10) >>> 0) digits++
    let p = this.#pos + digits
    this.#pos = p
    let x = v
    do {
      const q = (x / 10) >>> 0
      buf[--p] = 48 + x - q * 10
      x = q
    } while (x > 0)
  }

  /** Bytes written since the last `take()`, or since `into()`. */
  get length(): number {
    return this.#pos
  }

  /** A copy of what was written, which starts the next piece. */
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.#pos)
    this.#buf.copy(out, 0, 0, this.#pos)
    this.#pos = 0
    return out
  }

  /** Writes go straight into a series' `store` (a new one when it has less than `room`) until `done()`: no scratch, no copy. */
  into(store: Buffer | undefined, room: number): void {
    if (this.#buf !== this.#scratch || this.#pos !== 0)
      throw new Error('ByteWriter.into() while a piece is being written')
    this.#buf = store ?? EMPTY
    this.reserve(room)
  }

  /** Ends `into()`: the store now holding the bytes from 0 to the `length` read before. */
  done(): Buffer {
    const store = this.#buf
    this.#buf = this.#scratch
    this.#pos = 0
    return store
  }
}

const EMPTY = Buffer.alloc(0)

export const writer = new ByteWriter()

/** Sample lines per buffer for counters and gauges: a few KiB, so no chunk holds a whole family. */
const LINES_PER_CHUNK = 64

/** `${line}${formatValue(value)}\n` per item as bytes, in buffers of `LINES_PER_CHUNK` lines. */
export function* lineChunks<T>(
  items: Iterable<T>,
  line: (item: T) => Buffer,
  value: (item: T) => number,
): Generator<Buffer> {
  let n = 0
  for (const item of items) {
    const head = line(item)
    writer.reserve(head.length + MAX_NUMBER_BYTES + 1)
    writer.bytes(head)
    writer.value(value(item))
    writer.byte(0x0a)
    if (++n === LINES_PER_CHUNK) {
      yield writer.take()
      n = 0
    }
  }
  if (n > 0) yield writer.take()
}
