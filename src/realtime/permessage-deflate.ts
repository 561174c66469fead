import { constants, inflateRawSync } from 'node:zlib'
import { BOMB_MIN_BYTES, BOMB_RATIO } from '../proxy/tap.ts'

/**
 * permessage-deflate (RFC 7692, https://www.rfc-editor.org/rfc/rfc7692) on the measuring side.
 * The endpoints negotiate it between themselves (the proxy passes the offer and the answer
 * untouched) and the relay passes the compressed frames as they are; the measuring side inflates
 * a copy of each compressed message it needs to read.
 *
 * With context takeover (the default) a message may refer back into the previous messages'
 * text, up to the sender's window (at most 32 KiB). Inflating each message on its own with the
 * last 32 KiB of that direction's earlier output as a preset dictionary is equivalent, and keeps
 * the work synchronous and per message, with a bounded state: 32 KiB per direction. A message the
 * measuring side did not hold (over the size limit) breaks that chain: later messages of that
 * direction are then not inflated (they still pass untouched).
 *
 * Past the first MiB a direction may inflate at most BOMB_RATIO times the compressed bytes it was
 * sent, as an HTTP body may (realtime events compress 1.3× as speech, about 8× as text deltas
 * with context takeover); a direction past it is inflated no more. How much inflating one turn
 * of the event loop may do is the session's to bound (session.ts: INFLATE_TURN).
 */

/** What the 101's `Sec-WebSocket-Extensions` agreed on, per direction. */
export interface DeflateTerms {
  /** Each message from the server starts a fresh window. */
  readonly serverNoContextTakeover: boolean
  readonly clientNoContextTakeover: boolean
}

/** The permessage-deflate terms of the upstream's answer, or undefined when it accepted no compression. */
export function negotiatedDeflate(extensions: string | undefined): DeflateTerms | undefined {
  if (extensions === undefined) return undefined
  // The answer names at most one accepted offer per extension (RFC 7692 §5).
  for (const ext of extensions.split(',')) {
    const params = ext.split(';').map((p) => p.trim().toLowerCase())
    if (params[0] !== 'permessage-deflate') continue
    const names = new Set(params.slice(1).map((p) => p.split('=')[0].trim()))
    return { serverNoContextTakeover: names.has('server_no_context_takeover'), clientNoContextTakeover: names.has('client_no_context_takeover') }
  }
  return undefined
}

/** The 4 bytes the sender strips from the end of each compressed message (RFC 7692 §7.2.1). */
const TAIL = Buffer.from([0x00, 0x00, 0xff, 0xff])
/** The largest window permessage-deflate allows (2^15). */
const WINDOW = 32 * 1024

/** One direction's inflater. */
export class MessageInflater {
  readonly #takeover: boolean
  readonly #maxOutput: number
  #window: Buffer | undefined
  #broken: string | undefined
  /** Compressed bytes inflated so far, and what they inflated to. */
  #compressed = 0
  #inflated = 0

  /** `maxOutput`: the most bytes one message may inflate to (the measuring side's message limit). */
  constructor(contextTakeover: boolean, maxOutput: number) {
    this.#takeover = contextTakeover
    this.#maxOutput = maxOutput
  }

  /** Why this direction can no longer be inflated, else undefined. */
  get broken(): string | undefined {
    return this.#broken
  }

  /** Counts what a message inflated; whether the direction is now past BOMB_RATIO (then it is broken). */
  #overBudget(compressed: number, inflated: number): boolean {
    this.#compressed += compressed
    this.#inflated += inflated
    if (this.#inflated <= BOMB_MIN_BYTES || this.#inflated <= BOMB_RATIO * this.#compressed) return false
    this.#broken = `inflate budget: messages inflate more than ${BOMB_RATIO}×`
    return true
  }

  /** A compressed message was not seen whole (over the size limit): with context takeover, later ones cannot be read. */
  missed(): void {
    if (this.#takeover) this.#broken ??= 'a compressed message over the size limit broke the deflate context'
  }

  /** The message's text, or undefined when it cannot be inflated within the limit. */
  inflate(payload: Buffer): Buffer | undefined {
    if (this.#broken !== undefined) return undefined
    let out: Buffer
    try {
      out = inflateRawSync(Buffer.concat([payload, TAIL]), {
        finishFlush: constants.Z_SYNC_FLUSH,
        windowBits: 15,
        maxOutputLength: this.#maxOutput,
        ...(this.#window === undefined ? {} : { dictionary: this.#window }),
      })
    } catch (err) {
      // Over the limit (it inflated that much first, and counts) or not deflate data: with context
      // takeover nothing later can be read either.
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' && this.#overBudget(payload.length, this.#maxOutput)) return undefined
      if (this.#takeover) this.#broken = `inflating failed: ${(err as Error).message}`
      return undefined
    }
    if (this.#overBudget(payload.length, out.length)) return undefined
    if (this.#takeover) this.#window = nextWindow(this.#window, out)
    return out
  }
}

/** The last 32 KiB of everything inflated so far in this direction. */
function nextWindow(window: Buffer | undefined, out: Buffer): Buffer {
  if (out.length >= WINDOW) return Buffer.from(out.subarray(out.length - WINDOW))
  if (window === undefined) return Buffer.from(out)
  const joined = Buffer.concat([window, out])
  return joined.length <= WINDOW ? joined : Buffer.from(joined.subarray(joined.length - WINDOW))
}
