import { NO_EVENTS } from './types.ts'
import type { ContentEvent, StreamParser, StreamSummary } from './types.ts'

/**
 * A whole (non-streamed) JSON answer: kept up to a size bound, parsed once at the end for its
 * usage and model. It has no content chunks, so no TTFT or gaps; E2E, status and tokens count.
 */
export class JsonBodyParser implements StreamParser {
  readonly #parts: Buffer[] = []
  #bytes = 0
  #tooLarge = false
  readonly #limit: number
  readonly #summarize: (value: unknown) => StreamSummary

  constructor(limit: number, summarize: (value: unknown) => StreamSummary) {
    this.#limit = limit
    this.#summarize = summarize
  }

  push(chunk: Uint8Array): readonly ContentEvent[] {
    if (this.#tooLarge) return NO_EVENTS
    this.#bytes += chunk.byteLength
    if (this.#bytes > this.#limit) {
      this.#tooLarge = true
      this.#parts.length = 0
      return NO_EVENTS
    }
    this.#parts.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))
    return NO_EVENTS
  }

  end(): StreamSummary {
    if (this.#tooLarge) return { parseError: `JSON body of more than ${this.#limit} bytes` }
    if (this.#bytes === 0) return {}
    let value: unknown
    try {
      value = JSON.parse(Buffer.concat(this.#parts).toString('utf8'))
    } catch {
      return { parseError: 'invalid JSON body' }
    }
    try {
      return this.#summarize(value)
    } catch (err) {
      return { parseError: `unexpected body shape: ${(err as Error).message}` }
    }
  }
}
