import { isAscii } from 'node:buffer'
import { asBuffer } from './bytes.ts'
/**
 * Byte-level Server-Sent Events decoder per the WHATWG grammar
 * (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
 * It works on bytes so a read split at any byte gives the same events; events over `maxEventBytes` are dropped.
 */

export type SseEventSink = (event: string, data: string) => void
export type SseOversizeSink = (bytes: number) => void

const LF = 10
const CR = 13
const COLON = 58
const SPACE = 32
const EMPTY = Buffer.alloc(0)

/** Does the line name `field` (followed by a colon or the end of the line)? */
function isField(text: string, start: number, end: number, field: string): boolean {
  const n = field.length
  if (end - start < n || (end - start > n && text.charCodeAt(start + n) !== COLON)) return false
  return text.slice(start, start + n) === field
}

export class SseDecoder {
  readonly maxEventBytes: number
  /** Bytes of a line not yet terminated (a view, or a copy once joined). */
  #partial: Buffer = EMPTY
  #data: string | undefined = undefined
  #event = ''
  #eventBytes = 0
  #oversized = false
  /** The previous read ended in CR: a leading LF of the next read belongs to that line end. */
  #skipLF = false
  #bomChecked = false
  /** The line being read outgrew maxEventBytes; its bytes are no longer kept. */
  #lineTooLong = false
  /** Lines the spec ignores (no comment, no known field): a stream of nothing else is not SSE. */
  unknownLines = 0
  /** Bytes of the too-long line that were not kept. */
  #droppedBytes = 0

  constructor(maxEventBytes = 1 << 20) {
    this.maxEventBytes = maxEventBytes
  }

  push(chunk: Uint8Array, onEvent: SseEventSink, onOversize?: SseOversizeSink): void {
    let buf = asBuffer(chunk)
    let pos = 0
    const len = buf.length
    if (len === 0) return
    if (this.#skipLF) {
      this.#skipLF = false
      if (buf[0] === LF) pos = 1
    }
    if (!this.#bomChecked) {
      // The BOM may itself arrive split across reads; wait for 3 bytes (or a line end).
      const head = this.#partial.length > 0 ? Buffer.concat([this.#partial, buf.subarray(pos)]) : buf.subarray(pos)
      if (head.length < 3 && head.indexOf(LF) < 0 && head.indexOf(CR) < 0) {
        this.#partial = Buffer.from(head)
        return
      }
      this.#bomChecked = true
      const skip = head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf ? 3 : 0
      buf = head.subarray(skip)
      this.#partial = EMPTY
      pos = 0
      this.push(buf, onEvent, onOversize)
      return
    }
    if (this.#partial.length > 0 || this.#lineTooLong) {
      // The line begun in an earlier read ends in this one (or not yet).
      const lf = buf.indexOf(LF, pos)
      const cr = buf.indexOf(CR, pos)
      const end = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr)
      if (end === -1) {
        this.#keepPartial(buf, pos, len)
        return
      }
      if (this.#lineTooLong) {
        // Its start was dropped to bound memory: a comment stays harmless, anything else spoils the event.
        this.#lineTooLong = false
        if (this.#partial[0] !== COLON) {
          this.#oversized = true
          this.#eventBytes += this.#droppedBytes + (end - pos)
        }
        this.#droppedBytes = 0
        this.#partial = EMPTY
      } else {
        const line = Buffer.concat([this.#partial, buf.subarray(pos, end)])
        this.#partial = EMPTY
        this.#line(line.toString('latin1'), 0, line.length, line, 0, isAscii(line), onEvent, onOversize)
      }
      pos = this.#afterLineEnd(buf[end] === CR, end + 1 < len ? buf[end + 1] : -1, end)
    }
    if (pos < len) this.#lines(buf, pos, onEvent, onOversize)
  }

  /**
   * The lines of `buf` from `from`: the read as one latin1 string gives native line search with text
   * offsets equal to byte offsets; values are UTF-8-decoded only when the read is not ASCII.
   */
  #lines(buf: Buffer, from: number, onEvent: SseEventSink, onOversize?: SseOversizeSink): void {
    const len = buf.length
    const text = buf.toString('latin1', from, len)
    const ascii = isAscii(from === 0 ? buf : buf.subarray(from))
    const n = text.length
    let pos = 0
    // CRs are rare: search for them natively, and again only once passed.
    let nextCR = buf.indexOf(CR, from)
    if (nextCR !== -1) nextCR -= from
    while (pos < n) {
      const nextLF = text.indexOf('\n', pos)
      if (nextCR !== -1 && nextCR < pos) {
        nextCR = buf.indexOf(CR, from + pos)
        if (nextCR !== -1) nextCR -= from
      }
      if (nextLF === -1 && nextCR === -1) {
        this.#keepPartial(buf, from + pos, len)
        return
      }
      const end = nextCR === -1 || (nextLF !== -1 && nextLF < nextCR) ? nextLF : nextCR
      this.#line(text, pos, end, buf, from, ascii, onEvent, onOversize)
      pos = this.#afterLineEnd(text.charCodeAt(end) === CR, end + 1 < n ? text.charCodeAt(end + 1) : -1, end)
    }
  }

  /** Where the next line starts after a line end at `end`: CRLF is one line end, even split across reads. */
  #afterLineEnd(isCR: boolean, next: number, end: number): number {
    if (!isCR) return end + 1
    if (next === -1) {
      this.#skipLF = true
      return end + 1
    }
    return next === LF ? end + 2 : end + 1
  }

  /** End of stream: an incomplete event is discarded, as the spec says. */
  end(): void {
    this.#partial = EMPTY
    this.#lineTooLong = false
    this.#droppedBytes = 0
    this.#data = undefined
    this.#event = ''
    this.#eventBytes = 0
    this.#oversized = false
  }

  #keepPartial(buf: Buffer, from: number, to: number): void {
    if (this.#lineTooLong) {
      this.#droppedBytes += to - from
      return
    }
    if (this.#partial.length + (to - from) > this.maxEventBytes) {
      // Keep only the first byte (to tell a comment).
      this.#lineTooLong = true
      this.#droppedBytes = this.#partial.length + (to - from)
      this.#partial = Buffer.from(
        this.#partial.length > 0 ? this.#partial.subarray(0, 1) : buf.subarray(from, from + 1),
      )
      return
    }
    this.#partial =
      this.#partial.length === 0 ? buf.subarray(from, to) : Buffer.concat([this.#partial, buf.subarray(from, to)])
  }

  /** One line, `text[start..end]` in latin1; its bytes are `buf` from `base`. */
  #line(
    text: string,
    start: number,
    end: number,
    buf: Buffer,
    base: number,
    ascii: boolean,
    onEvent: SseEventSink,
    onOversize?: SseOversizeSink,
  ): void {
    if (start === end) {
      this.#dispatch(onEvent, onOversize)
      return
    }
    const first = text.charCodeAt(start)
    if (first === COLON) return // comment / keep-alive
    this.#eventBytes += end - start
    if (this.#oversized || this.#eventBytes > this.maxEventBytes) {
      this.#oversized = true
      this.#data = undefined
      return
    }
    if (
      first === 100 /* d */ &&
      end - start >= 4 &&
      text.charCodeAt(start + 1) === 97 &&
      text.charCodeAt(start + 2) === 116 &&
      text.charCodeAt(start + 3) === 97
    ) {
      const value = this.#value(text, start + 4, end, buf, base, ascii)
      if (value === undefined) {
        this.unknownLines++
        return
      }
      this.#data = this.#data === undefined ? value : `${this.#data}\n${value}`
    } else if (first === 101 /* e */ && end - start >= 5 && text.slice(start, start + 5) === 'event') {
      const value = this.#value(text, start + 5, end, buf, base, ascii)
      if (value !== undefined) this.#event = value
      else this.unknownLines++
    } else if (!isField(text, start, end, 'id') && !isField(text, start, end, 'retry')) {
      this.unknownLines++
    }
  }

  /** Value after `field`: the field name must end the line or be followed by a colon. */
  #value(text: string, at: number, end: number, buf: Buffer, base: number, ascii: boolean): string | undefined {
    if (at === end) return ''
    if (text.charCodeAt(at) !== COLON) return undefined
    at++
    if (at < end && text.charCodeAt(at) === SPACE) at++
    return ascii ? text.slice(at, end) : buf.toString('utf8', base + at, base + end)
  }

  #dispatch(onEvent: SseEventSink, onOversize?: SseOversizeSink): void {
    const data = this.#data
    const event = this.#event
    const oversized = this.#oversized
    const bytes = this.#eventBytes
    this.#data = undefined
    this.#event = ''
    this.#eventBytes = 0
    this.#oversized = false
    if (oversized) {
      onOversize?.(bytes)
      return
    }
    if (data === undefined) return
    onEvent(event, data)
  }
}
