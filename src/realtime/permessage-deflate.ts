import { constants, createInflateRaw } from 'node:zlib'
import type { InflateRaw } from 'node:zlib'
import { BOMB_MIN_BYTES, BOMB_RATIO } from '../proxy/tap.ts'

/**
 * permessage-deflate (RFC 7692, https://www.rfc-editor.org/rfc/rfc7692) on the measuring side:
 * the endpoints negotiate it and the relay passes frames untouched; only a copy is inflated.
 * With context takeover a direction's messages are one raw deflate stream (each ended by a sync
 * flush whose 4-byte tail the sender cut), read by one inflate stream that keeps the window; without,
 * that stream is reset per message. A message is inflated in slices bounded by output bytes, so the
 * session can spread a large one over turns. A message not held (over the size limit) breaks the
 * chain, and so does passing BOMB_RATIO after the first MiB, as for an HTTP body.
 */

/** What the 101's `Sec-WebSocket-Extensions` agreed on, per direction. */
export interface DeflateTerms {
  /** Each message from the server starts a fresh window. */
  readonly serverNoContextTakeover: boolean
  readonly clientNoContextTakeover: boolean
}

/** Undefined when the upstream accepted no compression. */
export function negotiatedDeflate(extensions: string | undefined): DeflateTerms | undefined {
  if (extensions === undefined) return undefined
  // The answer names at most one accepted offer per extension (RFC 7692 §5).
  for (const ext of extensions.split(',')) {
    const params = ext.split(';').map((p) => p.trim().toLowerCase())
    if (params[0] !== 'permessage-deflate') continue
    const names = new Set(params.slice(1).map((p) => p.split('=')[0].trim()))
    return {
      serverNoContextTakeover: names.has('server_no_context_takeover'),
      clientNoContextTakeover: names.has('client_no_context_takeover'),
    }
  }
  return undefined
}

/** The 4 bytes the sender strips from the end of each compressed message (RFC 7692 §7.2.1). */
const TAIL = Buffer.from([0x00, 0x00, 0xff, 0xff])

/**
 * The zlib binding's synchronous step under `zlib.InflateRaw` (what `inflateRawSync` runs, but into
 * the caller's buffer and without closing the stream), reached past zlib's public API: the public
 * one-shot call sets up a fresh stream and a 32 KiB dictionary per message, 3–4× the inflating
 * itself (bench/lab/inflate-budget.ts). test/private-apis.test.ts pins it.
 */
interface ZlibInternals {
  readonly _handle: {
    writeSync(
      flush: number,
      input: Buffer,
      inOff: number,
      inLen: number,
      out: Buffer,
      outOff: number,
      outLen: number,
    ): void
  }
  /** After writeSync: [output space left, input left]. */
  readonly _writeState: Uint32Array
}

/** One inflate call writes at most this much; every inflater writes here, and a result is read before the next call. */
const SLICE = 64 * 1024
/** A whole message up to this size is a view of the shared output buffer; a larger one is a Buffer of its own. */
export const SHARED_UP_TO = SLICE
const scratch = Buffer.allocUnsafe(SLICE)

/** `step` returns this while the message is not yet whole. */
export const MORE = 'more'

export class MessageInflater {
  readonly #takeover: boolean
  readonly #maxOutput: number
  /** One raw inflate stream for the direction: with context takeover its window is the earlier messages. */
  #stream: InflateRaw | undefined
  #broken: string | undefined
  #compressed = 0
  #inflated = 0
  /** The message being inflated: its payload, how much of it (then of TAIL) went in, and its output so far. */
  #input: Buffer | undefined
  #inOff = 0
  #tailIn = false
  #parts: Buffer[] = []
  #size = 0
  /** Output bytes the last `step` produced. */
  produced = 0

  /** `maxOutput`: the measuring side's message limit. */
  constructor(contextTakeover: boolean, maxOutput: number) {
    this.#takeover = contextTakeover
    this.#maxOutput = maxOutput
  }

  get broken(): string | undefined {
    return this.#broken
  }

  /** Bytes held for the message being inflated (its payload and output so far). */
  get held(): number {
    return this.#input === undefined ? 0 : this.#input.length + this.#size
  }

  /** A compressed message not seen whole: with context takeover, later ones cannot be read. */
  missed(): void {
    if (this.#takeover) this.#broken ??= 'a compressed message over the size limit broke the deflate context'
  }

  /** The whole message at once; undefined when it cannot be read. Valid until the next call on any inflater. */
  inflate(payload: Buffer): Buffer | undefined {
    this.begin(payload)
    const out = this.step(Number.POSITIVE_INFINITY)
    return out === MORE ? undefined : out
  }

  /** Starts a message; `step` inflates it. */
  begin(payload: Buffer): void {
    this.#input = payload
    this.#inOff = 0
    this.#tailIn = false
    this.#parts = []
    this.#size = 0
    this.#compressed += payload.length
    if (!this.#takeover) this.#stream?.reset()
  }

  /**
   * Inflates up to `room` more output bytes (at least 1 KiB) of the message begun: the message once
   * whole (up to SHARED_UP_TO bytes valid until the next call on any inflater), MORE before,
   * undefined when it cannot be read.
   */
  step(room: number): Buffer | undefined | typeof MORE {
    this.produced = 0
    if (this.#input === undefined) return undefined
    if (this.#broken !== undefined) return this.#drop()
    const stream = this.#open()
    const internals = stream as unknown as ZlibInternals
    const handle = internals._handle
    const state = internals._writeState
    let have = 0
    for (;;) {
      const input = this.#tailIn ? TAIL : this.#input
      const before = this.#inOff
      const space = Math.min(SLICE - have, Math.max(1024, room - this.produced))
      handle.writeSync(constants.Z_SYNC_FLUSH, input, this.#inOff, input.length - this.#inOff, scratch, have, space)
      if (stream.errored !== null) {
        this.#stream = undefined
        return this.#fail(`inflating failed: ${stream.errored.message}`)
      }
      const got = space - state[0]
      this.#inOff = input.length - state[1]
      have += got
      this.#size += got
      this.produced += got
      if (this.#size > this.#maxOutput)
        return this.#fail(`inflating failed: a message inflates past ${this.#maxOutput} bytes`)
      if (this.#overBudget(got)) return this.#drop()
      const drained = state[0] > 0 && state[1] === 0
      if (drained && this.#tailIn) break
      if (!drained && got === 0 && this.#inOff === before) {
        // A final block (BFINAL) ended the deflate stream: the message is whole, a later one would
        // refer to a window this stream no longer has.
        if (this.#takeover) this.#broken = 'a compressed message ended the deflate stream'
        break
      }
      if (drained) {
        this.#tailIn = true
        this.#inOff = 0
      }
      if (have === SLICE || this.produced >= room) {
        this.#parts.push(Buffer.from(scratch.subarray(0, have)))
        have = 0
        if (this.produced >= room) return MORE
      }
    }
    const parts = this.#parts
    this.#input = undefined
    this.#parts = []
    if (parts.length === 0) return scratch.subarray(0, have)
    parts.push(scratch.subarray(0, have))
    return Buffer.concat(parts, this.#size)
  }

  /** Frees the stream's native memory now rather than at garbage collection. */
  close(): void {
    this.#stream?.destroy()
    this.#stream = undefined
    this.#drop()
  }

  #open(): InflateRaw {
    if (this.#stream !== undefined) return this.#stream
    const stream = createInflateRaw({ windowBits: 15 })
    // A data error destroys the stream, which then emits it: it is read from `errored` instead.
    stream.on('error', () => {})
    this.#stream = stream
    return stream
  }

  /** With context takeover nothing later can be read either. */
  #fail(reason: string): undefined {
    if (this.#takeover) this.#broken ??= reason
    else if (this.#stream !== undefined && this.#stream.errored === null) this.#stream.reset()
    return this.#drop()
  }

  #drop(): undefined {
    this.#input = undefined
    this.#parts = []
    return undefined
  }

  /** Whether the direction is now past BOMB_RATIO (then it is broken). */
  #overBudget(inflated: number): boolean {
    this.#inflated += inflated
    if (this.#inflated <= BOMB_MIN_BYTES || this.#inflated <= BOMB_RATIO * this.#compressed) return false
    this.#broken = `inflate budget: messages inflate more than ${BOMB_RATIO}×`
    return true
  }
}
