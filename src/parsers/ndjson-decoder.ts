import { asBuffer } from './bytes.ts'
/**
 * Byte-level NDJSON decoder (https://github.com/ndjson/ndjson-spec): a line is decoded only once complete,
 * so a read split at any byte gives the same lines; a line over `maxLineBytes` is dropped and reported.
 */

export type NdjsonLineSink = (line: string) => void
export type NdjsonOversizeSink = (bytes: number) => void

const LF = 10
const CR = 13

/** Decodes one response's NDJSON lines; `push` each read, `end` once. */
export class NdjsonDecoder {
  readonly maxLineBytes: number
  /** Bytes of the line not yet terminated: views of the reads, joined once the line ends. */
  #parts: Buffer[] = []
  #partialBytes = 0
  /** The line being read outgrew maxLineBytes: its bytes are counted, not kept. */
  #tooLong = false

  constructor(maxLineBytes = 1 << 20) {
    this.maxLineBytes = maxLineBytes
  }

  push(chunk: Uint8Array, onLine: NdjsonLineSink, onOversize?: NdjsonOversizeSink): void {
    const buf = asBuffer(chunk)
    const len = buf.length
    let pos = 0
    while (pos < len) {
      const lf = buf.indexOf(LF, pos)
      if (lf < 0) {
        this.#keep(buf, pos, len)
        return
      }
      if (this.#tooLong) {
        const bytes = this.#partialBytes + (lf - pos)
        this.#reset()
        onOversize?.(bytes)
      } else if (this.#partialBytes > 0) {
        if (this.#partialBytes + (lf - pos) > this.maxLineBytes) {
          const bytes = this.#partialBytes + (lf - pos)
          this.#reset()
          onOversize?.(bytes)
        } else {
          this.#parts.push(buf.subarray(pos, lf))
          const line = Buffer.concat(this.#parts)
          this.#reset()
          this.#line(line, 0, line.length, onLine)
        }
      } else if (lf - pos > this.maxLineBytes) {
        onOversize?.(lf - pos)
      } else {
        this.#line(buf, pos, lf, onLine)
      }
      pos = lf + 1
    }
  }

  /** End of stream: a last line without its `\n` still counts (some servers omit the final newline). */
  end(onLine: NdjsonLineSink, onOversize?: NdjsonOversizeSink): void {
    if (this.#tooLong) {
      const bytes = this.#partialBytes
      this.#reset()
      onOversize?.(bytes)
      return
    }
    if (this.#partialBytes === 0) return
    const line = Buffer.concat(this.#parts)
    this.#reset()
    this.#line(line, 0, line.length, onLine)
  }

  #keep(buf: Buffer, from: number, to: number): void {
    this.#partialBytes += to - from
    if (this.#tooLong) return
    if (this.#partialBytes > this.maxLineBytes) {
      this.#tooLong = true
      this.#parts = []
      return
    }
    this.#parts.push(buf.subarray(from, to))
  }

  #reset(): void {
    this.#parts = []
    this.#partialBytes = 0
    this.#tooLong = false
  }

  #line(buf: Buffer, start: number, end: number, onLine: NdjsonLineSink): void {
    if (end > start && buf[end - 1] === CR) end--
    // Whitespace-only lines carry nothing (a keep-alive newline); skip without decoding.
    let i = start
    while (i < end && (buf[i] === 32 || buf[i] === 9)) i++
    if (i === end) return
    onLine(buf.toString('utf8', start, end))
  }
}
