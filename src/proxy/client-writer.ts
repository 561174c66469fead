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
 * The upstream response's dispatch handler (undici's handler API, one object per request):
 * writes the head in the tick it arrives, each read to the client as it comes, pauses the
 * upstream while the client's socket is full, and only then hands the exchange a copy of what
 * was written. The client's bytes never wait for measuring.
 */

export interface ClientWriterOptions {
  readonly upstream: Config['upstream']
  /** The monotonic clock (ms). */
  readonly now: () => number
  /** `include_usage` was added upstream: take the added usage chunk out of an SSE answer. */
  readonly injected: boolean
  /** Ends the request on a proxy error: the error answer, or a cut stream once the head is out (forward.ts). */
  readonly fail: (err: TokentapError) => void
  /** The exchange's deadlines: the head stops `headers`; reads keep `idle` alive (forward.ts decides what expiry does). */
  readonly deadlines: Deadlines
  /** Add `x-tokentap-request-id` to the head (the route's `echo_request_id`). */
  readonly echoRequestId: boolean
  /** Send a `Server-Timing` trailer on a chunked answer (the route's `server_timing`, and the client sent `TE: trailers`). */
  readonly trailers: boolean
  /** The client's request (an informational 103 goes only to an HTTP/1.1 client). */
  readonly req: IncomingMessage
  /** Headers the embedding app set before the proxy took the reply over, merged into the head (app-headers.ts). */
  readonly appHeaders?: readonly string[]
}

export class ClientWriter implements Dispatcher.DispatchHandler {
  readonly #ex: Exchange
  readonly #res: ServerResponse
  readonly #o: ClientWriterOptions
  #controller: Dispatcher.DispatchController | undefined
  #upstreamDone = false
  /** Set when usage was injected and the response is an SSE stream to take the usage chunk out of. */
  #filter: UsageChunkFilter | undefined
  #waiting = false
  /** The head announced a `Server-Timing` trailer. */
  #trailer = false
  readonly #deadlines: Deadlines
  /** When the current wait for 'drain' began (a write returned false); undefined while not waiting. */
  #waitFrom: number | undefined
  readonly #resume = (): void => {
    this.#waiting = false
    this.#waited()
    // Before the controller: resuming parses what waited, which may pause again at once.
    this.#deadlines.resume(Deadline.idle)
    this.#controller?.resume()
  }

  /**
   * One socket read reaches onResponseData as many calls, one per HTTP chunk of a chunked body
   * (one per SSE event for most servers). They are gathered and written once at the end of the
   * same tick (a microtask: no added wait), so the client gets one write and the tap one push
   * per read, which is also when their bytes arrived.
   */
  #pending: Buffer[] = []
  #pendingAt = 0
  /**
   * When the response head was handled, until the end of its tick: body bytes parsed from the
   * same socket read arrived with the head, so their read started then, not when undici got
   * to them (the head's handling is part of what the first chunk waited for).
   */
  #headAt: number | undefined
  readonly #flush = (): void => this.flush()
  /** When the answer's last byte was written to the client: the exchange's t_end. */
  readonly #lastByte: LastByte

  constructor(ex: Exchange, res: ServerResponse, options: ClientWriterOptions) {
    this.#ex = ex
    this.#res = res
    this.#o = options
    this.#deadlines = options.deadlines
    this.#lastByte = new LastByte(res, options.now)
    ex.clientWritesWatched()
  }

  /** The upstream response ended or failed (nothing is left to abort). */
  get upstreamDone(): boolean {
    return this.#upstreamDone
  }

  /** When the answer's last byte was written (undefined until then, or when it never was). */
  get lastByteAt(): number | undefined {
    return this.#lastByte.at
  }

  /** Stops the upstream request (the client left, or a proxy timeout fired). */
  abort(reason: Error): void {
    this.#controller?.abort(reason)
  }

  /** The client's response closed (its deadlines are cleared by forward.ts). */
  responseClosed(): void {
    // A response ended with bytes still queued never gets its 'drain' (Node emits none once the
    // response is finished): they waited until it closed, which is when the last of them left.
    this.#waited()
  }

  /** A wait for the client's socket is over: the exchange learns how long the bytes were held. */
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
    // undici calls this as it writes the request head to the socket, in the same tick.
    this.#ex.requestSent(this.#o.now())
  }

  onResponseStart(c: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>, statusMessage?: string): void {
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
    // undici's header Buffers are views of the socket read they came in, often with the first
    // body bytes (up to 64 KiB): the controller would keep that read alive for the whole stream.
    unwrapped.rawHeaders = null
    const contentType = rawHeader(raw, 'content-type')
    const contentEncoding = rawHeader(raw, 'content-encoding')
    // The header getter is read within the call (a provider's timing headers), before raw changes below.
    const upstreamHeaders = raw
    this.#ex.responseStarted(statusCode, contentType, contentEncoding, at, rawHeader(raw, 'x-request-id'), (name) => rawHeader(upstreamHeaders, name))
    if (this.#o.injected && isSuccess(statusCode) && /^text\/event-stream/i.test(contentType ?? '') && contentEncoding === undefined) {
      this.#filter = new UsageChunkFilter()
      raw = withoutHeader(raw, 'content-length') // the client gets fewer bytes than the upstream sent
    }
    if (this.#o.appHeaders !== undefined) raw = withAppHeaders(raw, this.#o.appHeaders)
    if (this.#o.echoRequestId) raw.push('x-tokentap-request-id', this.#ex.id)
    // A trailer needs a chunked body: none with a length, none on bodiless answers.
    if (this.#o.trailers && !isBodiless(this.#ex.method, statusCode) && rawHeader(raw, 'content-length') === undefined) {
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
    // Send headers within this tick: an SSE client should see the response start before the
    // first event. When body bytes came in the same read, they go out with the headers in one
    // write instead (the data flush is queued after this one). Not `res.headersSent`: that is
    // true as soon as writeHead stored the head, before any of it is sent.
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
    // The end usually comes in the same read as the last bytes: they and the client's chunked
    // terminator go out in one write, not two; measuring waits until they are written.
    const socket = res.socket
    socket?.cork()
    const chunk = this.#write(false)
    this.#end()
    socket?.uncork()
    // Stamped before the last read is measured: the client has its bytes, and does not wait for that.
    this.#lastByte.settle()
    if (chunk !== undefined) this.#ex.data(chunk, this.#pendingAt, this.#o.now())
  }

  #end(): void {
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
    // Mid-stream the client must see a broken stream, never a clean end; before the head, the error answer.
    this.#o.fail(upstreamFailure(err, res.headersSent, this.#o.upstream))
  }

  /** Writes what the current read gathered, then lets the exchange measure it. */
  flush(): void {
    const chunk = this.#write(true)
    if (chunk !== undefined) this.#ex.data(chunk, this.#pendingAt, this.#o.now())
  }

  /** Writes what the current read gathered; returns it (undefined: nothing, or the client is gone). */
  #write(uncork: boolean): Buffer | undefined {
    const pending = this.#pending
    const n = pending.length
    if (n === 0) return undefined
    const chunk = n === 1 ? pending[0] : Buffer.concat(pending)
    this.#pending = []
    const res = this.#res
    if (res.destroyed) return undefined
    // With usage injection the client gets the stream less the added usage chunk; the tap still
    // sees every upstream byte.
    const out = this.#filter === undefined ? chunk : this.#filter.push(chunk)
    if (out.length > 0) {
      if (!res.write(out) && this.#controller !== undefined) this.#wait(this.#controller)
      // Node's res.write corks the socket until the next tick (connectionCorkNT in
      // node:_http_outgoing): the complete chunk goes to the kernel now, not after the parse.
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
