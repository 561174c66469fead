import zlib from 'node:zlib'
import type { ContentEvent, StreamParser, StreamSummary } from '../parsers/types.ts'

/**
 * The tap: gets a copy of each upstream read, after it was written to the client, and feeds it
 * to the request's parser. It never alters or delays the bytes and never throws: a parser or
 * decoder failure only ends measuring for this response.
 *
 * A compressed body (gzip, deflate, br) is inflated here, on the copy only, synchronously per
 * read, so each content event keeps the arrival time of the compressed bytes that completed it.
 */

export type ContentSink = (event: ContentEvent, at: number) => void

interface SyncInflater {
  _processChunk(chunk: Buffer, flushFlag: number): Buffer
  close(): void
}

function inflaterFor(encoding: string | undefined): { engine: SyncInflater; flush: number } | undefined | null {
  if (encoding === undefined) return undefined
  const e = encoding.trim().toLowerCase()
  if (e === '' || e === 'identity') return undefined
  // `_processChunk` without a callback is zlib's own synchronous path (what gunzipSync uses).
  if (e === 'gzip' || e === 'x-gzip') return { engine: zlib.createGunzip() as unknown as SyncInflater, flush: zlib.constants.Z_SYNC_FLUSH }
  if (e === 'deflate') return { engine: zlib.createInflate() as unknown as SyncInflater, flush: zlib.constants.Z_SYNC_FLUSH }
  if (e === 'br') return { engine: zlib.createBrotliDecompress() as unknown as SyncInflater, flush: zlib.constants.BROTLI_OPERATION_FLUSH }
  return null // an encoding we cannot read (zstd, stacked encodings): pass through, don't measure
}

export class Tap {
  readonly #parser: StreamParser
  readonly #sink: ContentSink
  readonly #inflater: { engine: SyncInflater; flush: number } | undefined
  #failed: string | undefined
  #bytes = 0

  constructor(parser: StreamParser, contentEncoding: string | undefined, sink: ContentSink) {
    this.#parser = parser
    this.#sink = sink
    const inflater = inflaterFor(contentEncoding)
    if (inflater === null) this.#failed = `unsupported content-encoding '${contentEncoding}'`
    this.#inflater = inflater ?? undefined
  }

  /** Decoded bytes the parser has seen. */
  get bytes(): number {
    return this.#bytes
  }

  push(chunk: Buffer, at: number): void {
    if (this.#failed !== undefined) return
    try {
      const data = this.#inflater === undefined ? chunk : this.#inflater.engine._processChunk(chunk, this.#inflater.flush)
      this.#bytes += data.length
      const events = this.#parser.push(data)
      for (let i = 0; i < events.length; i++) this.#sink(events[i], at)
    } catch (err) {
      this.#fail(`${(err as Error).message}`)
    }
  }

  end(): StreamSummary {
    let summary: StreamSummary
    try {
      summary = this.#parser.end()
    } catch (err) {
      summary = { parseError: (err as Error).message }
    }
    if (this.#inflater !== undefined) {
      try {
        this.#inflater.engine.close()
      } catch {
        // already closed by an error
      }
    }
    if (this.#failed !== undefined && summary.parseError === undefined) return { ...summary, parseError: this.#failed }
    return summary
  }

  #fail(reason: string): void {
    this.#failed = reason
  }
}
