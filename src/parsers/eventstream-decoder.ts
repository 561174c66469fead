import zlib from 'node:zlib'
import { asBuffer } from './bytes.ts'

/**
 * Incremental decoder of AWS event streams (https://docs.aws.amazon.com/lexv2/latest/dg/event-stream-encoding.html).
 * A corrupt or oversized frame stops decoding for good: a binary stream cannot be resynchronised safely.
 */

export interface EventFrame {
  /** String headers (`:message-type`, `:event-type`, `:exception-type`, `:content-type`, …). */
  readonly headers: Readonly<Record<string, string>>
  readonly payload: Buffer
}

export type FrameSink = (frame: EventFrame) => void
export type FrameErrorSink = (reason: string) => void

const PRELUDE = 12
/** Prelude plus message CRC: the smallest frame there is. */
const OVERHEAD = 16

// zlib.crc32 is the format's IEEE CRC-32 (Node ≥ 20.15).
const crc32 = (buf: Buffer, start: number, end: number): number => zlib.crc32(buf.subarray(start, end))

/** Value sizes of the fixed-width header types (0/1 booleans carry no value). */
const FIXED: Record<number, number> = { 0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16 }

/** Decodes one response's eventstream; `push` each read, `end` once. */
export class EventStreamDecoder {
  readonly maxFrameBytes: number
  /** Bytes of an incomplete frame: views of the reads, joined once the frame is whole. */
  #parts: Buffer[] = []
  #have = 0
  /** Total length of the pending frame, once its prelude was read and checked; else 0. */
  #need = 0
  #failed = false

  constructor(maxFrameBytes = 1 << 20) {
    this.maxFrameBytes = maxFrameBytes
  }

  push(chunk: Uint8Array, onFrame: FrameSink, onError: FrameErrorSink): void {
    if (this.#failed || chunk.byteLength === 0) return
    let buf = asBuffer(chunk)
    if (this.#have > 0) {
      this.#parts.push(buf)
      this.#have += buf.length
      if (this.#need === 0) {
        if (this.#have < PRELUDE) return
        const head = Buffer.concat(this.#parts)
        this.#parts = [head]
        const total = this.#prelude(head, 0, onError)
        if (total === 0) return
        this.#need = total
      }
      if (this.#have < this.#need) return
      buf = Buffer.concat(this.#parts)
      this.#parts = []
      this.#have = 0
      this.#need = 0
    }
    const len = buf.length
    let pos = 0
    while (len - pos >= PRELUDE) {
      const total = this.#prelude(buf, pos, onError)
      if (total === 0) return
      if (len - pos < total) {
        this.#need = total
        break
      }
      if (!this.#frame(buf, pos, total, onFrame, onError)) return
      pos += total
    }
    if (pos < len) {
      this.#parts = [buf.subarray(pos)]
      this.#have = len - pos
    }
  }

  /** End of stream: bytes of an unfinished frame mean the stream was cut. */
  end(onError: FrameErrorSink): void {
    if (!this.#failed && this.#have > 0) this.#fail(`stream ended inside a frame (${this.#have} bytes)`, onError)
    this.#parts = []
    this.#have = 0
  }

  #fail(reason: string, onError: FrameErrorSink): void {
    this.#failed = true
    this.#parts = []
    this.#have = 0
    onError(reason)
  }

  /** Checks the prelude at `pos`; returns the frame's total length, or 0 after failing. */
  #prelude(buf: Buffer, pos: number, onError: FrameErrorSink): number {
    const total = buf.readUInt32BE(pos)
    const headers = buf.readUInt32BE(pos + 4)
    if (crc32(buf, pos, pos + 8) !== buf.readUInt32BE(pos + 8)) {
      this.#fail('prelude CRC mismatch', onError)
      return 0
    }
    if (total < OVERHEAD || headers > total - OVERHEAD) {
      this.#fail(`bad frame lengths (total ${total}, headers ${headers})`, onError)
      return 0
    }
    if (total > this.maxFrameBytes) {
      this.#fail(`frame of ${total} bytes is over the limit`, onError)
      return 0
    }
    return total
  }

  #frame(buf: Buffer, pos: number, total: number, onFrame: FrameSink, onError: FrameErrorSink): boolean {
    const end = pos + total
    if (crc32(buf, pos, end - 4) !== buf.readUInt32BE(end - 4)) {
      this.#fail('message CRC mismatch', onError)
      return false
    }
    const headersEnd = pos + PRELUDE + buf.readUInt32BE(pos + 4)
    const headers = parseHeaders(buf, pos + PRELUDE, headersEnd)
    if (headers === undefined) {
      this.#fail('malformed frame headers', onError)
      return false
    }
    onFrame({ headers, payload: buf.subarray(headersEnd, end - 4) })
    return true
  }
}

/** String headers of a frame; other types are skipped by their size. Undefined when malformed. */
function parseHeaders(buf: Buffer, at: number, end: number): Record<string, string> | undefined {
  const out: Record<string, string> = {}
  while (at < end) {
    const nameLen = buf[at]
    const typeAt = at + 1 + nameLen
    if (typeAt >= end) return undefined
    const name = buf.toString('latin1', at + 1, typeAt)
    const type = buf[typeAt]
    at = typeAt + 1
    if (type === 6 || type === 7) {
      if (at + 2 > end) return undefined
      const n = buf.readUInt16BE(at)
      if (at + 2 + n > end) return undefined
      if (type === 7) out[name] = buf.toString('utf8', at + 2, at + 2 + n)
      at += 2 + n
    } else {
      const size = FIXED[type]
      if (size === undefined || at + size > end) return undefined
      at += size
    }
  }
  return out
}
