import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { TokentapError } from '../errors.ts'
import type { Config } from '../config/schema.ts'
import { withAppHeaders } from './app-headers.ts'
import { clientResponseHeaders, rawHeader, withoutHeader } from './headers.ts'
import { UsageChunkFilter } from './inject-usage.ts'
import { Deadline } from './deadlines.ts'
import type { Deadlines } from './deadlines.ts'
import { LastByte } from './last-byte.ts'
import { relayInformational, writeResponseHead } from './response-head.ts'
import { serverTimingValue } from './server-timing.ts'
import { upstreamFailure } from './upstream-errors.ts'
import type { Exchange } from './exchange.ts'
import { isBodiless, isSuccess } from '../http-status.ts'

/**
 * The upstream response's undici dispatch handler: writes each read to the client as it comes,
 * pauses the upstream while the client's socket is full, and only then gives the exchange a copy.
 */

export interface ClientWriterOptions {
  readonly upstream: Config['upstream']
  readonly now: () => number
  readonly injected: boolean
  /** Ends the request on a proxy error (forward.ts). */
  readonly fail: (err: TokentapError) => void
  /** The head stops `headers`; reads keep `idle` alive. */
  readonly deadlines: Deadlines
  readonly echoRequestId: boolean
  /** The route's `server_timing`, and the client sent `TE: trailers`. */
  readonly trailers: boolean
  /** An informational 103 goes only to an HTTP/1.1 client. */
  readonly req: IncomingMessage
  readonly appHeaders?: readonly string[]
}

export class ClientWriter implements Dispatcher.DispatchHandler {
  readonly #ex: Exchange
  readonly #res: ServerResponse
  readonly #o: ClientWriterOptions
  #controller: Dispatcher.DispatchController | undefined
  #upstreamDone = false
  #filter: UsageChunkFilter | undefined
  #waiting = false
  #trailer = false
  readonly #deadlines: Deadlines
  #waitFrom: number | undefined
  readonly #resume = (): void => {
    this.#waiting = false
    this.#waited()
    // Before the controller: resuming parses what waited, which may pause again at once.
    this.#deadlines.resume(Deadline.idle)
    this.#controller?.resume()
  }

  /**
   * undici calls onResponseData once per HTTP chunk of a read; they are gathered and written once
   * at the end of the tick (a microtask, no added wait), so the client gets one write per read.
   */
  #pending: Buffer[] = []
  #pendingAt = 0
  /** Body bytes parsed from the head's socket read arrived with it, not when undici got to them. */
  #headAt: number | undefined
  readonly #flush = (): void => this.flush()
  readonly #lastByte: LastByte

  constructor(ex: Exchange, res: ServerResponse, options: ClientWriterOptions) {
    this.#ex = ex
    this.#res = res
    this.#o = options
    this.#deadlines = options.deadlines
    this.#lastByte = new LastByte(res, options.now)
    ex.clientWritesWatched()
  }

  get upstreamDone(): boolean {
    return this.#upstreamDone
  }

  get lastByteAt(): number | undefined {
    return this.#lastByte.at
  }

  abort(reason: Error): void {
    this.#controller?.abort(reason)
  }

  responseClosed(): void {
    // Node emits no 'drain' once the response is finished: bytes still queued waited until it closed.
    this.#waited()
  }

  #waited(): void {
    const from = this.#waitFrom
    if (from === undefined) return
    this.#waitFrom = undefined
    this.#ex.clientWaited(Math.max(0, this.#o.now() - from))
  }

  onRequestStart(c: Dispatcher.DispatchController): void {
    this.#controller = c
    if (this.#res.destroyed) {
      c.abort(new TokentapError('TOKENTAP_ERR_CLIENT_GONE'))
      return
    }
    this.#ex.requestSent(this.#o.now())
  }

  onResponseStart(
    c: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
    statusMessage?: string,
  ): void {
    const at = this.#o.now()
    const res = this.#res
    if (res.destroyed) return
    // undici hands informational responses (102, 103) here too; the final one follows.
    if (statusCode < 200) {
      relayInformational(this.#o.req, res, statusCode, headers)
      return
    }
    this.#deadlines.clear(Deadline.headers)
    const unwrapped = c as unknown as { rawHeaders: Buffer[] | null }
    let raw = clientResponseHeaders(unwrapped.rawHeaders ?? [])
    // undici's header Buffers are views of the socket read (up to 64 KiB), which the controller would keep alive.
    unwrapped.rawHeaders = null
    const contentType = rawHeader(raw, 'content-type')
    const contentEncoding = rawHeader(raw, 'content-encoding')
    // Read now, before raw changes below.
    const upstreamHeaders = raw
    this.#ex.responseStarted(statusCode, contentType, contentEncoding, at, rawHeader(raw, 'x-request-id'), (name) =>
      rawHeader(upstreamHeaders, name),
    )
    if (
      this.#o.injected &&
      isSuccess(statusCode) &&
      /^text\/event-stream/i.test(contentType ?? '') &&
      contentEncoding === undefined
    ) {
      this.#filter = new UsageChunkFilter()
      raw = withoutHeader(raw, 'content-length') // the client gets fewer bytes than the upstream sent
    }
    if (this.#o.appHeaders !== undefined) raw = withAppHeaders(raw, this.#o.appHeaders)
    if (this.#o.echoRequestId) raw.push('x-tokentap-request-id', this.#ex.id)
    // A trailer needs a chunked body: none with a length, none on bodiless answers.
    if (
      this.#o.trailers &&
      !isBodiless(this.#ex.method, statusCode) &&
      rawHeader(raw, 'content-length') === undefined
    ) {
      raw.push('trailer', 'Server-Timing')
      this.#trailer = true
    }
    const refused = writeResponseHead(res, statusCode, statusMessage ?? '', raw)
    if (refused !== undefined) {
      // A head Node will not write (a control byte, an invalid header value): a clear 502 now.
      this.#o.fail(new TokentapError('TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE', refused.message))
      return
    }
    this.#deadlines.start(Deadline.idle)
    // Within this tick, so an SSE client sees the response start before the first event; body
    // bytes of the same read go out with the head in one write instead (not `res.headersSent`:
    // that is true once writeHead stored the head, before it is sent).
    this.#headAt = at
    queueMicrotask(() => {
      this.#headAt = undefined
      if (this.#pending.length === 0 && !res.writableEnded && !res.destroyed) res.flushHeaders()
    })
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    const res = this.#res
    if (res.destroyed) return
    if (this.#pending.length === 0) {
      this.#pendingAt = this.#headAt ?? this.#o.now()
      this.#deadlines.touch(Deadline.idle)
      queueMicrotask(this.#flush)
    }
    this.#pending.push(chunk)
    // The client is already behind: stop reading now, not only after this read is written.
    if (res.writableNeedDrain) this.#wait(c)
  }

  onResponseEnd(): void {
    this.#deadlines.clear(Deadline.idle)
    this.#upstreamDone = true
    const res = this.#res
    if (this.#trailer && !res.destroyed) {
      // The trailer's figures include the last read, so it is measured before the end is written.
      this.flush()
      const m = this.#ex.measureNow(this.#o.now())
      if (m !== undefined) res.addTrailers({ 'Server-Timing': serverTimingValue(m) })
      this.#end()
      return
    }
    // The last bytes and the chunked terminator usually go out in one write; measuring waits.
    const socket = res.socket
    socket?.cork()
    const chunk = this.#write(false)
    this.#end()
    socket?.uncork()
    // Stamped before the last read is measured: the client does not wait for that.
    this.#lastByte.settle()
    if (chunk !== undefined) this.#ex.data(chunk, this.#pendingAt, this.#o.now())
  }

  #end(): void {
    this.#lastByte.watch()
    const filter = this.#filter
    if (filter !== undefined) this.#res.end(filter.end())
    else this.#res.end()
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.#deadlines.clear(Deadline.idle)
    this.flush()
    this.#upstreamDone = true
    this.#deadlines.clear(Deadline.headers)
    const res = this.#res
    // res.writableEnded: the proxy already answered (a refused head, a timeout).
    if (res.destroyed || res.writableEnded) return
    // Mid-stream the client must see a broken stream, never a clean end.
    this.#o.fail(upstreamFailure(err, res.headersSent, this.#o.upstream))
  }

  flush(): void {
    const chunk = this.#write(true)
    if (chunk !== undefined) this.#ex.data(chunk, this.#pendingAt, this.#o.now())
  }

  /** Undefined: nothing, or the client is gone. */
  #write(uncork: boolean): Buffer | undefined {
    const pending = this.#pending
    const n = pending.length
    if (n === 0) return undefined
    const chunk = n === 1 ? pending[0] : Buffer.concat(pending)
    this.#pending = []
    const res = this.#res
    if (res.destroyed) return undefined
    // The tap still sees every upstream byte.
    const out = this.#filter === undefined ? chunk : this.#filter.push(chunk)
    if (out.length > 0) {
      if (!res.write(out) && this.#controller !== undefined) this.#wait(this.#controller)
      // res.write corks the socket until the next tick (connectionCorkNT in node:_http_outgoing): send the chunk now.
      if (uncork) res.socket?.uncork()
    }
    return chunk
  }

  #wait(c: Dispatcher.DispatchController): void {
    c.pause()
    this.#deadlines.pause(Deadline.idle)
    if (this.#waiting) return
    this.#waiting = true
    this.#waitFrom = this.#o.now()
    this.#res.once('drain', this.#resume)
  }
}
