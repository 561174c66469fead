import { constants, inflateRawSync } from 'node:zlib'
import { BOMB_MIN_BYTES, BOMB_RATIO } from '../proxy/tap.ts'

/**
 * permessage-deflate (RFC 7692, https://www.rfc-editor.org/rfc/rfc7692) on the measuring side:
 * the endpoints negotiate it and the relay passes frames untouched; only a copy is inflated.
 * With context takeover each message is inflated alone with the direction's last 32 KiB of
 * output as a preset dictionary, equivalent and with bounded state; a message not held (over the
 * size limit) breaks the chain, and so does passing BOMB_RATIO after the first MiB, as for an HTTP body.
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
const WINDOW = 32 * 1024

export class MessageInflater {
  readonly #takeover: boolean
  readonly #maxOutput: number
  #window: Buffer | undefined
  #broken: string | undefined
  #compressed = 0
  #inflated = 0

  /** `maxOutput`: the measuring side's message limit. */
  constructor(contextTakeover: boolean, maxOutput: number) {
    this.#takeover = contextTakeover
    this.#maxOutput = maxOutput
  }

  get broken(): string | undefined {
    return this.#broken
  }

  /** Whether the direction is now past BOMB_RATIO (then it is broken). */
  #overBudget(compressed: number, inflated: number): boolean {
    this.#compressed += compressed
    this.#inflated += inflated
    if (this.#inflated <= BOMB_MIN_BYTES || this.#inflated <= BOMB_RATIO * this.#compressed) return false
    this.#broken = `inflate budget: messages inflate more than ${BOMB_RATIO}×`
    return true
  }

  /** A compressed message not seen whole: with context takeover, later ones cannot be read. */
  missed(): void {
    if (this.#takeover) this.#broken ??= 'a compressed message over the size limit broke the deflate context'
  }

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
      // With context takeover nothing later can be read either.
      if (
        (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE' &&
        this.#overBudget(payload.length, this.#maxOutput)
      )
        return undefined
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
