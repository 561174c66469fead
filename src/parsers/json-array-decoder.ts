import { asBuffer } from './bytes.ts'
/**
 * Incremental decoder of one streamed JSON array (Gemini without `?alt=sse`): it only finds element
 * boundaries and decodes an element once complete, so a read split at any byte gives the same elements.
 * A top-level object (an error body) is one element.
 */

export interface JsonArraySink {
  /** A complete top-level element's JSON text. */
  element(text: string): void
  /** An element of `bytes` bytes was over the limit and was dropped. */
  oversize(bytes: number): void
  /** The bytes are not a JSON array (or object); nothing more will be reported. */
  invalid(reason: string): void
}

const State = {
  /** Before the top-level value: whitespace, a BOM. */
  start: 0,
  /** Inside the array, between elements: whitespace, commas, or `]`. */
  between: 1,
  /** Inside an element. */
  element: 2,
  /** After the closing `]` (or the top-level object). */
  done: 3,
  /** Gave up: not a JSON array. */
  invalid: 4,
} as const
type State = (typeof State)[keyof typeof State]

const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d
const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c

const BOM = [0xef, 0xbb, 0xbf] as const

const isSpace = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09

export class JsonArrayDecoder {
  readonly maxElementBytes: number
  #state: State = State.start
  /** The whole value is one object (not an array): it ends at depth 0. */
  #bare = false
  /** Nesting depth inside the current element (0 for a scalar element). */
  #depth = 0
  #inString = false
  #escaped = false
  /** The current element is a number or literal: it ends at a delimiter. */
  #scalar = false
  /** Bytes of the current element from earlier reads (views, as long as it is within the limit). */
  #parts: Buffer[] = []
  #bytes = 0
  #oversized = false
  /** Bytes of a possible BOM seen so far. */
  #bom = 0

  constructor(maxElementBytes = 1 << 20) {
    this.maxElementBytes = maxElementBytes
  }

  push(chunk: Uint8Array, sink: JsonArraySink): void {
    const buf = asBuffer(chunk)
    const len = buf.length
    let i = 0
    /** Where the current element starts in this read, while inside one. */
    let from = this.#state === State.element ? 0 : -1
    while (i < len) {
      const state = this.#state
      if (state === State.element) {
        const end = this.#scan(buf, i, len)
        if (end < 0) break
        this.#finish(buf, from, end, sink)
        from = -1
        i = end
        this.#state = this.#bare ? State.done : State.between
        continue
      }
      const b = buf[i]
      if (state === State.start) {
        if (this.#bom < 3 && b === BOM[this.#bom]) {
          this.#bom++
          i++
          continue
        }
        this.#bom = 3
        if (isSpace(b)) i++
        else if (b === OPEN_BRACKET) {
          this.#state = State.between
          i++
        } else if (b === OPEN_BRACE) {
          this.#bare = true
          this.#begin()
          from = i
        } else {
          this.#invalid(sink, 'the body is not a JSON array')
          return
        }
      } else if (state === State.between) {
        if (isSpace(b) || b === COMMA) i++
        else if (b === CLOSE_BRACKET) {
          this.#state = State.done
          i++
        } else if (b === CLOSE_BRACE) {
          this.#invalid(sink, 'unbalanced brace between array elements')
          return
        } else {
          this.#begin()
          from = i
        }
      } else if (state === State.done) {
        if (!isSpace(b)) {
          this.#invalid(sink, 'bytes after the end of the array')
          return
        }
        i++
      } else return
    }
    if (this.#state === State.element) this.#keep(buf, from, len)
  }

  /** End of stream: an incomplete element is discarded. */
  end(): void {
    this.#parts = []
    this.#bytes = 0
  }

  #begin(): void {
    this.#state = State.element
    this.#depth = 0
    this.#inString = false
    this.#escaped = false
    this.#scalar = false
    this.#parts = []
    this.#bytes = 0
    this.#oversized = false
  }

  /** Scans an element from `i`: the index just past its end, or -1 when it goes on past this read. */
  #scan(buf: Buffer, i: number, len: number): number {
    let depth = this.#depth
    let inString = this.#inString
    let escaped = this.#escaped
    const atStart = depth === 0 && !inString && !this.#scalar && this.#bytes === 0
    if (atStart) {
      const b = buf[i]
      if (b === OPEN_BRACE || b === OPEN_BRACKET) depth = 1
      else if (b === QUOTE) inString = true
      else this.#scalar = true
      if (!this.#scalar) i++
    }
    for (; i < len; i++) {
      const b = buf[i]
      if (inString) {
        if (escaped) escaped = false
        else if (b === BACKSLASH) escaped = true
        else if (b === QUOTE) {
          inString = false
          if (depth === 0) {
            this.#save(0, false, false)
            return i + 1
          }
        }
        continue
      }
      if (this.#scalar) {
        if (b === COMMA || b === CLOSE_BRACKET || isSpace(b)) {
          this.#save(0, false, false)
          return i
        }
        continue
      }
      if (b === QUOTE) inString = true
      else if (b === OPEN_BRACE || b === OPEN_BRACKET) depth++
      else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) {
        depth--
        if (depth === 0) {
          this.#save(0, false, false)
          return i + 1
        }
      }
    }
    this.#save(depth, inString, escaped)
    return -1
  }

  #save(depth: number, inString: boolean, escaped: boolean): void {
    this.#depth = depth
    this.#inString = inString
    this.#escaped = escaped
  }

  /** Keeps this read's part of an unfinished element, within the bound. */
  #keep(buf: Buffer, from: number, to: number): void {
    this.#bytes += to - from
    if (this.#oversized) return
    if (this.#bytes > this.maxElementBytes) {
      this.#oversized = true
      this.#parts = []
      return
    }
    if (to > from) this.#parts.push(buf.subarray(from, to))
  }

  #finish(buf: Buffer, from: number, end: number, sink: JsonArraySink): void {
    this.#keep(buf, from, end)
    const bytes = this.#bytes
    const parts = this.#parts
    this.#parts = []
    this.#bytes = 0
    this.#scalar = false
    if (this.#oversized) {
      this.#oversized = false
      sink.oversize(bytes)
      return
    }
    const text = parts.length === 1 ? parts[0].toString('utf8') : Buffer.concat(parts).toString('utf8')
    sink.element(text)
  }

  #invalid(sink: JsonArraySink, reason: string): void {
    this.#state = State.invalid
    this.#parts = []
    this.#bytes = 0
    sink.invalid(reason)
  }
}
