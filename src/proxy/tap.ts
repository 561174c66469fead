import zlib from 'node:zlib'
import type { Transform } from 'node:stream'
import { JsonBodyParser } from '../parsers/json-body-parser.ts'
import { selectParser } from '../parsers/registry.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import type { ContentEvent, ParserContext, StreamParser, StreamSummary } from '../parsers/types.ts'

/**
 * Gets a copy of each upstream read after it was written to the client, for the parser; a parser
 * or decoder failure only ends measuring. zlib works off the event loop, so each inflated piece
 * keeps the arrival time of the compressed read it came from (a FIFO of arrival times).
 */

export type ContentSink = (event: ContentEvent, at: number) => void

/** Bounds memory while zlib lags behind. */
const MAX_INFLATED_BYTES = 256 * 1024 * 1024

/**
 * Past this ratio (after the first MiB) a body is a decompression bomb, not an LLM stream: real SSE
 * JSON compresses 5–30×, gzip at most ~1,000×. realtime/permessage-deflate.ts uses the same bound.
 */
export const BOMB_RATIO = 200
export const BOMB_MIN_BYTES = 1024 * 1024

function inflaterFor(encoding: string | undefined): Transform | undefined | null {
  if (encoding === undefined) return undefined
  const e = encoding.trim().toLowerCase()
  if (e === '' || e === 'identity') return undefined
  const flush = { flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH }
  if (e === 'gzip' || e === 'x-gzip') return zlib.createGunzip(flush)
  if (e === 'deflate') return zlib.createInflate(flush)
  if (e === 'br')
    return zlib.createBrotliDecompress({
      flush: zlib.constants.BROTLI_OPERATION_FLUSH,
      finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH,
    })
  return null // an encoding we cannot read (zstd, stacked encodings): pass through, don't measure
}

export interface TappedResponse {
  readonly provider: string
  /** Undefined when no parser reads this content-type. */
  readonly tap: Tap | undefined
  readonly reported: ReportedTimes | undefined
}

/** The registry chooses provider and parser by the route's `provider`, the path and the content-type. */
export function tapResponse(
  setting: string,
  ctx: ParserContext,
  contentEncoding: string | undefined,
  sink: ContentSink,
  header?: (lowerName: string) => string | undefined,
): TappedResponse {
  const selection = selectParser(setting, ctx.path, ctx.contentType, ctx, header)
  const tap = selection.parser === undefined ? undefined : new Tap(selection.parser, contentEncoding, sink)
  return { provider: selection.provider, tap, reported: selection.reported }
}

export class Tap {
  readonly #parser: StreamParser
  readonly #sink: ContentSink
  readonly #inflater: Transform | undefined
  readonly #arrivals: number[] = []
  #failed: string | undefined
  #bytes = 0
  #compressed = 0
  readonly streamed: boolean

  constructor(parser: StreamParser, contentEncoding: string | undefined, sink: ContentSink) {
    this.#parser = parser
    this.streamed = !(parser instanceof JsonBodyParser)
    this.#sink = sink
    const inflater = inflaterFor(contentEncoding)
    if (inflater === null) this.#failed = `unsupported content-encoding '${contentEncoding}'`
    else if (inflater !== undefined) {
      inflater.on('data', (data: Buffer) => {
        this.#feed(data, this.#arrivals[0] ?? 0)
        if (this.#bytes > BOMB_MIN_BYTES && this.#bytes > BOMB_RATIO * this.#compressed) {
          this.#fail(`${contentEncoding} body inflates more than ${BOMB_RATIO}×: not measured`)
          inflater.destroy()
        }
      })
      inflater.on('error', (err: Error) => this.#fail(`cannot decode ${contentEncoding}: ${err.message}`))
    }
    this.#inflater = inflater ?? undefined
  }

  get bytes(): number {
    return this.#bytes
  }

  push(chunk: Buffer, at: number): void {
    if (this.#failed !== undefined) return
    const inflater = this.#inflater
    if (inflater === undefined) {
      this.#feed(chunk, at)
      return
    }
    if (inflater.writableLength > MAX_INFLATED_BYTES) {
      this.#fail('decoder is too far behind')
      return
    }
    this.#arrivals.push(at)
    this.#compressed += chunk.length
    inflater.write(chunk, () => this.#arrivals.shift())
  }

  /** Flushes (waiting for the decoder when the body was compressed) and summarises. */
  end(): StreamSummary | Promise<StreamSummary> {
    const inflater = this.#inflater
    if (inflater === undefined || this.#failed !== undefined) {
      inflater?.destroy()
      return this.#summary()
    }
    return new Promise((resolve) => {
      const done = (): void => {
        inflater.destroy()
        resolve(this.#summary())
      }
      inflater.once('end', done)
      inflater.once('error', done)
      // Destroyed while draining (a bomb found late): no 'end' will come.
      inflater.once('close', done)
      inflater.end()
      inflater.resume()
    })
  }

  #feed(data: Buffer, at: number): void {
    if (this.#failed !== undefined) return
    try {
      this.#bytes += data.length
      const events = this.#parser.push(data)
      for (let i = 0; i < events.length; i++) this.#sink(events[i], at)
    } catch (err) {
      this.#fail((err as Error).message)
    }
  }

  #summary(): StreamSummary {
    let summary: StreamSummary
    try {
      summary = this.#parser.end()
    } catch (err) {
      summary = { parseError: (err as Error).message }
    }
    if (this.#failed !== undefined && summary.parseError === undefined) return { ...summary, parseError: this.#failed }
    return summary
  }

  #fail(reason: string): void {
    this.#failed ??= reason
  }
}
