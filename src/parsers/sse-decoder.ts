import { asBuffer } from './bytes.ts'
/**
 * Byte-level Server-Sent Events decoder.
 *
 * Follows the WHATWG event-stream grammar
 * (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
 * lines end in CRLF, LF or CR; a blank line dispatches; `:` starts a comment; one optional
 * space after the field's colon; several `data:` lines join with `\n`; a leading BOM is
 * skipped; an event left incomplete at end of stream is not dispatched.
 *
 * Works on bytes and decodes only the `data`/`event` values it keeps, so a read split at any
 * byte (inside a line, a CRLF pair or a multi-byte character) gives the same events.
 * Memory is bounded: an event larger than `maxEventBytes` is dropped and reported.
 */

export type SseEventSink = (event: string, data: string) => void
export type SseOversizeSink = (bytes: number) => void

const LF = 10
const CR = 13
const COLON = 58
const SPACE = 32
const EMPTY = Buffer.alloc(0)


/** Does the line name `field` (followed by a colon or the end of the line)? */
function isField(buf: Buffer, start: number, end: number, field: string): boolean {
  const n = field.length
  if (end - start < n || (end - start > n && buf[start + n] !== COLON)) return false
  for (let i = 0; i < n; i++) if (buf[start + i] !== field.charCodeAt(i)) return false
  return true
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
  /**
   * Non-blank lines that were neither a comment nor a field of the grammar (data, event, id,
   * retry). The spec ignores them; a stream of nothing else is not an event stream (junk).
   */
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
      return this.push(buf, onEvent, onOversize)
    }
    let nextCR = buf.indexOf(CR, pos)
    while (pos < len) {
      let nextLF = buf.indexOf(LF, pos)
      if (nextCR !== -1 && nextCR < pos) nextCR = buf.indexOf(CR, pos)
      let end: number
      if (nextLF === -1 && nextCR === -1) {
        this.#keepPartial(buf, pos, len)
        return
      }
      if (nextCR === -1 || (nextLF !== -1 && nextLF < nextCR)) end = nextLF
      else end = nextCR
      if (this.#lineTooLong) {
        // The start of this line was dropped to bound memory (its first byte was kept):
        // a comment stays harmless, anything else spoils the event it belongs to.
        this.#lineTooLong = false
        if (this.#partial[0] !== COLON) {
          this.#oversized = true
          this.#eventBytes += this.#droppedBytes + (end - pos)
        }
        this.#droppedBytes = 0
        this.#partial = EMPTY
      } else if (this.#partial.length > 0) {
        const line = Buffer.concat([this.#partial, buf.subarray(pos, end)])
        this.#partial = EMPTY
        this.#line(line, 0, line.length, onEvent, onOversize)
      } else {
        this.#line(buf, pos, end, onEvent, onOversize)
      }
      if (buf[end] === CR) {
        if (end + 1 < len) {
          pos = buf[end + 1] === LF ? end + 2 : end + 1
        } else {
          this.#skipLF = true
          pos = end + 1
        }
      } else {
        pos = end + 1
      }
    }
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
      // Bound memory: keep only the line's first byte (to tell a comment) and count the rest.
      this.#lineTooLong = true
      this.#droppedBytes = this.#partial.length + (to - from)
      this.#partial = Buffer.from(this.#partial.length > 0 ? this.#partial.subarray(0, 1) : buf.subarray(from, from + 1))
      return
    }
    this.#partial = this.#partial.length === 0 ? buf.subarray(from, to) : Buffer.concat([this.#partial, buf.subarray(from, to)])
  }

  #line(buf: Buffer, start: number, end: number, onEvent: SseEventSink, onOversize?: SseOversizeSink): void {
    if (start === end) {
      this.#dispatch(onEvent, onOversize)
      return
    }
    const first = buf[start]
    if (first === COLON) return // comment / keep-alive
    this.#eventBytes += end - start
    if (this.#oversized || this.#eventBytes > this.maxEventBytes) {
      this.#oversized = true
      this.#data = undefined
      return
    }
    // Field names we keep: "data" and "event"; anything else (id, retry, unknown) is ignored.
    if (first === 100 /* d */ && end - start >= 4 && buf[start + 1] === 97 && buf[start + 2] === 116 && buf[start + 3] === 97) {
      const value = this.#value(buf, start + 4, end)
      if (value === undefined) {
        this.unknownLines++
        return
      }
      this.#data = this.#data === undefined ? value : this.#data + '\n' + value
    } else if (first === 101 /* e */ && end - start >= 5 && buf.toString('latin1', start, start + 5) === 'event') {
      const value = this.#value(buf, start + 5, end)
      if (value !== undefined) this.#event = value
      else this.unknownLines++
    } else if (!isField(buf, start, end, 'id') && !isField(buf, start, end, 'retry')) {
      this.unknownLines++
    }
  }

  /** Value after `field`: the field name must end the line or be followed by a colon. */
  #value(buf: Buffer, at: number, end: number): string | undefined {
    if (at === end) return ''
    if (buf[at] !== COLON) return undefined
    at++
    if (buf[at] === SPACE) at++
    return buf.toString('utf8', at, end)
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
