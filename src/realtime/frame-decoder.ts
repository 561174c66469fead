import { Opcode } from './frame.ts'

/**
 * A WebSocket frame decoder (RFC 6455 §5.2) over a copy of one direction of a relayed connection.
 * It holds at most `maxMessageBytes` of one message (a larger one is only counted), so a frame
 * announcing 2^62 bytes or endless fragments cost nothing; it never throws and never changes its
 * input, which the relay may still be writing. Bytes that are not frames end decoding for this
 * direction only: the receiving endpoint decides what to do with them.
 */

export interface FrameSink {
  /**
   * `compressed`: RSV1 on its first frame (permessage-deflate); `payload` undefined when over the
   * limit. False: decode no further in this `push` (the sink is out of room for this turn).
   */
  message(opcode: number, payload: Buffer | undefined, compressed: boolean, size: number): boolean | undefined
  close(code: number | undefined, reason: string): void
}

const EMPTY = Buffer.alloc(0)
const HEAD = 0
const PAYLOAD = 1
const FAILED = 2
/** Payload pieces from this size are copied and unmasked by words. */
const WORDS_FROM = 256

/** Why a frame header cannot start a frame here (RFC 6455 §5.2, §5.4, §5.5), else undefined. `length` −1: over 2^53. */
function frameProblem(b0: number, length: number, messageOpen: boolean): string | undefined {
  const opcode = b0 & 0x0f
  if ((b0 & 0x30) !== 0) return 'RSV2 or RSV3 set'
  if (length < 0) return 'a frame length over 2^53'
  if (opcode >= 0x8) {
    if (opcode !== Opcode.close && opcode !== Opcode.ping && opcode !== Opcode.pong) return `reserved opcode ${opcode}`
    if ((b0 & 0x80) === 0 || length > 125) return 'a fragmented or oversized control frame'
    return undefined
  }
  if (opcode === Opcode.continuation)
    return messageOpen ? undefined : 'a continuation frame with no message to continue'
  if (opcode !== Opcode.text && opcode !== Opcode.binary) return `reserved opcode ${opcode}`
  return messageOpen ? 'a new message inside a fragmented one' : undefined
}

export class FrameDecoder {
  readonly #sink: FrameSink
  readonly #max: number
  #state = HEAD
  /** Header bytes gathered so far (2 to 14 of them). */
  readonly #head = Buffer.alloc(14)
  #headHave = 0
  #fin = false
  #opcode = 0
  #masked = false
  readonly #mask = Buffer.alloc(4)
  /** The mask, rotated to a word boundary, as bytes and as one word in the platform's byte order. */
  readonly #word = new Uint32Array(1)
  readonly #words = new Uint8Array(this.#word.buffer)
  #remaining = 0
  #offset = 0
  /** The data message being gathered (opcode 0: none); its payload is `#have` bytes of `#buffer`. */
  #messageOpcode = 0
  #compressed = false
  #size = 0
  #gathering = false
  #buffer: Buffer | undefined
  #have = 0
  /** The current control frame's payload (at most 125 bytes). */
  readonly #control = Buffer.alloc(125)
  #controlHave = 0
  #failure: string | undefined
  /** The sink said stop after the message it was just given, or this push's room is spent. */
  #paused = false
  /** Payload bytes this push may still gather (copy and unmask). */
  #room = 0
  /** Payload bytes the last push gathered. */
  gathered = 0

  constructor(sink: FrameSink, maxMessageBytes: number) {
    this.#sink = sink
    this.#max = maxMessageBytes
  }

  get failure(): string | undefined {
    return this.#failure
  }

  /** Bytes allocated for the message being gathered right now (at most the message limit). */
  get held(): number {
    return this.#buffer?.length ?? 0
  }

  /** The decoder sits between two frames (a frame of the proxy's own may go in here). */
  get atBoundary(): boolean {
    return this.#state === HEAD && this.#headHave === 0
  }

  /**
   * Decodes `chunk` from `start`, gathering at most `room` payload bytes (a payload only passed, over
   * the limit, costs none); returns where it stopped: `chunk.length`, just after a message whose sink
   * said stop, or inside a payload once `room` is spent (then the rest is pushed again later, from there).
   */
  push(chunk: Buffer, start = 0, room = Number.POSITIVE_INFINITY): number {
    let i = start
    this.#paused = false
    this.#room = room
    while (i < chunk.length && this.#state !== FAILED && !this.#paused) {
      if (this.#state === HEAD) i = this.#readHead(chunk, i)
      else i = this.#readPayload(chunk, i)
    }
    this.gathered = room - this.#room
    return this.#state === FAILED ? chunk.length : i
  }

  /** Lets go of the message being gathered: the session ended, nothing more is pushed. */
  release(): void {
    this.#drop()
  }

  #fail(reason: string): void {
    this.#state = FAILED
    this.#failure = reason
    this.#drop()
  }

  /** Lets go of the message's payload: the rest of it only passes. */
  #drop(): void {
    this.#gathering = false
    this.#buffer = undefined
    this.#have = 0
  }

  #readHead(chunk: Buffer, i: number): number {
    const head = this.#head
    if (this.#headHave === 0 && chunk.length - i >= 2) {
      // The whole header in this read (the common case): no length check per byte.
      head[0] = chunk[i]
      head[1] = chunk[i + 1]
      this.#headHave = 2
      const need = this.#headLength()
      if (chunk.length - i >= need) {
        for (let k = 2; k < need; k++) head[k] = chunk[i + k]
        this.#startFrame()
        return i + need
      }
      i += 2
    }
    while (i < chunk.length) {
      head[this.#headHave++] = chunk[i++]
      const need = this.#headLength()
      if (need === 0 || this.#headHave < need) continue
      this.#startFrame()
      return i
    }
    return i
  }

  /** The full header length once enough of it is known, else 0. */
  #headLength(): number {
    if (this.#headHave < 2) return 0
    const b1 = this.#head[1]
    const len7 = b1 & 0x7f
    return 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (b1 & 0x80 ? 4 : 0)
  }

  #startFrame(): void {
    const head = this.#head
    const b0 = head[0]
    const b1 = head[1]
    this.#headHave = 0
    const opcode = b0 & 0x0f
    const fin = (b0 & 0x80) !== 0
    const len7 = b1 & 0x7f
    let length = len7
    let at = 2
    if (len7 === 126) {
      length = head.readUInt16BE(2)
      at = 4
    } else if (len7 === 127) {
      const big = head.readBigUInt64BE(2)
      length = big > BigInt(Number.MAX_SAFE_INTEGER) ? -1 : Number(big)
      at = 10
    }
    const problem = frameProblem(b0, length, this.#messageOpcode !== 0)
    if (problem !== undefined) {
      this.#fail(problem)
      return
    }
    this.#masked = (b1 & 0x80) !== 0
    if (this.#masked) for (let k = 0; k < 4; k++) this.#mask[k] = head[at + k]
    const control = opcode >= 0x8
    if (opcode === Opcode.text || opcode === Opcode.binary) {
      this.#messageOpcode = opcode
      this.#compressed = (b0 & 0x40) !== 0
      this.#size = 0
      this.#gathering = true
      this.#have = 0
    }
    this.#fin = fin
    this.#opcode = opcode
    this.#remaining = length
    this.#offset = 0
    if (!control) {
      this.#size += length
      // Over the limit: let go of what was held; the rest of the message only passes.
      if (this.#size > this.#max) this.#drop()
    } else this.#controlHave = 0
    this.#state = PAYLOAD
    if (length === 0) this.#endFrame()
  }

  /**
   * Grows to what the frames announced so far, then by doubling up to the limit: one allocation for
   * a one-frame message, never a Buffer per fragment, however it is framed.
   */
  #reserve(size: number): Buffer {
    const buffer = this.#buffer
    if (buffer !== undefined && buffer.length >= size) return buffer
    const grown = Buffer.allocUnsafe(
      buffer === undefined ? this.#size : Math.max(size, Math.min(this.#max, 2 * buffer.length)),
    )
    if (buffer !== undefined) buffer.copy(grown, 0, 0, this.#have)
    this.#buffer = grown
    return grown
  }

  #readPayload(chunk: Buffer, i: number): number {
    let take = Math.min(this.#remaining, chunk.length - i)
    if (this.#opcode >= 0x8) {
      this.#unmaskInto(chunk, i, take, this.#control, this.#controlHave)
      this.#controlHave += take
    } else if (this.#gathering) {
      if (take > this.#room) {
        take = this.#room
        this.#paused = true
      }
      this.#room -= take
      this.#unmaskInto(chunk, i, take, this.#reserve(this.#have + take), this.#have)
      this.#have += take
    }
    this.#offset += take
    this.#remaining -= take
    if (this.#remaining === 0) this.#endFrame()
    return i + take
  }

  /**
   * Unmasks into `out`, never in place: the relay may still be writing `chunk`. A copy, then XOR by
   * aligned 32-bit words: about 6× a loop over bytes for 64 KiB (bench/lab/inflate-budget.ts).
   */
  #unmaskInto(chunk: Buffer, i: number, take: number, out: Buffer, at: number): void {
    const mask = this.#mask
    const start = this.#offset
    if (take < WORDS_FROM) {
      // Tiny frames: a call to copy and a typed array view cost more than the loop.
      if (this.#masked) for (let k = 0; k < take; k++) out[at + k] = chunk[i + k] ^ mask[(start + k) & 3]
      else for (let k = 0; k < take; k++) out[at + k] = chunk[i + k]
      return
    }
    chunk.copy(out, at, i, i + take)
    if (!this.#masked) return
    const address = out.byteOffset + at
    let k = 0
    while (k < take && ((address + k) & 3) !== 0) {
      out[at + k] ^= mask[(start + k) & 3]
      k++
    }
    const words = (take - k) >>> 2
    if (words > 0) {
      const m = (start + k) & 3
      const word = this.#words
      for (let b = 0; b < 4; b++) word[b] = mask[(m + b) & 3]
      const key = this.#word[0]
      const view = new Uint32Array(out.buffer, address + k, words)
      for (let w = 0; w < words; w++) view[w] ^= key
      k += words * 4
    }
    for (; k < take; k++) out[at + k] ^= mask[(start + k) & 3]
  }

  #endFrame(): void {
    this.#state = HEAD
    const opcode = this.#opcode
    if (opcode >= 0x8) {
      const payload = this.#control.subarray(0, this.#controlHave)
      if (opcode === Opcode.close)
        this.#sink.close(
          payload.length >= 2 ? payload.readUInt16BE(0) : undefined,
          payload.length > 2 ? payload.toString('utf8', 2) : '',
        )
      return
    }
    if (!this.#fin) return
    const buffer = this.#buffer
    const payload = !this.#gathering
      ? undefined
      : buffer === undefined
        ? EMPTY
        : buffer.length === this.#have
          ? buffer
          : buffer.subarray(0, this.#have)
    const messageOpcode = this.#messageOpcode
    this.#messageOpcode = 0
    this.#drop()
    if (this.#sink.message(messageOpcode, payload, this.#compressed, this.#size) === false) this.#paused = true
  }
}

/**
 * Where a direction's frame boundaries are, and how many data messages have ended, from the headers
 * alone (payloads are skipped, never read). It is fed every read: the relay asks it before writing a
 * frame of its own while the measuring decoder may be behind (a session's backlog is decoded over
 * turns) or stopped, and a backlog let go is counted from it.
 */
export class FrameBoundary {
  /** Header bytes gathered so far, then the payload bytes still to skip. */
  readonly #head = Buffer.alloc(14)
  #headHave = 0
  #skip = 0
  /** The frame being skipped ends a data message (FIN, not a control frame). */
  #ends = false
  /** Data messages whose last byte has come. */
  messages = 0

  get atBoundary(): boolean {
    return this.#headHave === 0 && this.#skip === 0
  }

  push(chunk: Buffer): void {
    const length = chunk.length
    let i = 0
    while (i < length) {
      if (this.#skip > 0) {
        const take = Math.min(this.#skip, length - i)
        i += take
        this.#skip -= take
        if (this.#skip === 0 && this.#ends) this.messages++
        continue
      }
      if (this.#headHave === 0 && length - i >= 2) {
        // The whole header in this read (the common case): read in place, no copy.
        const b1 = chunk[i + 1]
        const len7 = b1 & 0x7f
        const need = 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (b1 & 0x80 ? 4 : 0)
        if (length - i >= need) {
          this.#ends = (chunk[i] & 0x88) === 0x80
          this.#skip =
            len7 === 126 ? chunk.readUInt16BE(i + 2) : len7 === 127 ? Number(chunk.readBigUInt64BE(i + 2)) : len7
          i += need
          if (this.#skip === 0 && this.#ends) this.messages++
          continue
        }
      }
      const head = this.#head
      head[this.#headHave++] = chunk[i++]
      if (this.#headHave < 2) continue
      const b1 = head[1]
      const len7 = b1 & 0x7f
      if (this.#headHave < 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (b1 & 0x80 ? 4 : 0)) continue
      this.#headHave = 0
      this.#ends = (head[0] & 0x88) === 0x80
      // A length over 2^53 never ends (the decoder calls it bytes that are not frames).
      this.#skip = len7 === 126 ? head.readUInt16BE(2) : len7 === 127 ? Number(head.readBigUInt64BE(2)) : len7
      if (this.#skip === 0 && this.#ends) this.messages++
    }
  }
}
