import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { TokentapError } from '../errors.ts'
import type { Config } from '../config/schema.ts'
import { withAppHeaders } from './app-headers.ts'
import { clientResponseHeaders, rawHeader, withoutHeader } from './headers.ts'
import { UsageChunkFilter } from './inject-usage.ts'
import { IdleDeadline } from './idle-deadline.ts'
import { LastByte } from './last-byte.ts'
import { relayInformational, writeResponseHead } from './response-head.ts'
import { serverTimingValue } from './server-timing.ts'
import type { Exchange } from './exchange.ts'

/**
 * The upstream response's dispatch handler (undici's handler API, one object per request):
 * writes the head in the tick it arrives, each read to the client as it comes, pauses the
 * upstream while the client's socket is full, and only then hands the exchange a copy of what
 * was written. The client's bytes never wait for measuring.
 */

const CONNECT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ECONNRESET_BEFORE_HEADERS'])

const codeOf = (err: Error): string => {
  const e = err as Error & { code?: string; cause?: { code?: string } }
  return e.code ?? e.cause?.code ?? ''
}

/** Maps an upstream failure before response headers to the error the client gets. */
export function errorBeforeHeaders(err: Error, upstream: Config['upstream']): TokentapError {
  if (err instanceof TokentapError) return err
  const code = codeOf(err)
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return new TokentapError('TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', upstream.headers_timeout_ms)
  const mapped = CONNECT_CODES.has(code) ? new TokentapError('TOKENTAP_ERR_UPSTREAM_CONNECT', code) : new TokentapError('TOKENTAP_ERR_UPSTREAM_FAILED', code || err.message)
  if (code !== '') mapped.detail = code
  return mapped
}

export interface ClientWriterOptions {
  readonly upstream: Config['upstream']
  /** The monotonic clock (ms). */
  readonly now: () => number
  /** `include_usage` was added upstream: take the added usage chunk out of an SSE answer. */
  readonly injected: boolean
  /** Answers the client with a proxy error (before any byte of the response was written). */
  readonly fail: (err: TokentapError) => void
  /** Add `x-tokentap-request-id` to the head (the route's `echo_request_id`). */
  readonly echoRequestId: boolean
  /** Send a `Server-Timing` trailer on a chunked answer (the route's `server_timing`, and the client sent `TE: trailers`). */
  readonly trailers: boolean
  /** The client's request (an informational 103 goes only to an HTTP/1.1 client). */
  readonly req: IncomingMessage
  /** The response head came (or the exchange ended): the proxy's headers timeout stops. */
  readonly headed: () => void
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
  /** `upstream.idle_timeout_ms` between two reads of the body, on the proxy's own timer. */
  readonly #idle: IdleDeadline
  /** When the current wait for 'drain' began (a write returned false); undefined while not waiting. */
  #waitFrom: number | undefined
  readonly #resume = (): void => {
    this.#waiting = false
    this.#waited()
    // Before the controller: resuming parses what waited, which may pause again at once.
    this.#idle.resume()
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
    this.#idle = new IdleDeadline(options.upstream.idle_timeout_ms, () => this.#idleTimeout())
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

  /** The client's response closed: no timer of this exchange may outlive it. */
  responseClosed(): void {
    this.#idle.clear()
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
    this.#o.headed()
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
    if (this.#o.injected && statusCode >= 200 && statusCode < 300 && /^text\/event-stream/i.test(contentType ?? '') && contentEncoding === undefined) {
      this.#filter = new UsageChunkFilter()
      raw = withoutHeader(raw, 'content-length') // the client gets fewer bytes than the upstream sent
    }
    if (this.#o.appHeaders !== undefined) raw = withAppHeaders(raw, this.#o.appHeaders)
    if (this.#o.echoRequestId) raw.push('x-tokentap-request-id', this.#ex.id)
    // A trailer needs a chunked body: none with a length, none on bodiless answers.
    if (this.#o.trailers && statusCode >= 200 && statusCode !== 204 && statusCode !== 304 && this.#ex.method !== 'HEAD' && rawHeader(raw, 'content-length') === undefined) {
      raw.push('trailer', 'Server-Timing')
      this.#trailer = true
    }
    const refused = writeResponseHead(res, statusCode, statusMessage ?? '', raw)
    if (refused !== undefined) {
      // A head Node will not write (a control byte, an invalid header value): the client gets a clear 502 now.
      const err = new TokentapError('TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE', refused.message)
      this.#o.fail(err)
      c.abort(err)
      return
    }
    this.#idle.start()
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
      this.#idle.read()
      queueMicrotask(this.#flush)
    }
    this.#pending.push(chunk)
    // The client is already behind: stop reading now, not only after this read is written.
    if (res.writableNeedDrain) this.#wait(c)
  }

  onResponseEnd(): void {
    this.#idle.clear()
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
    // The end usually comes in the same upstream read as the last bytes (`data: [DONE]` and the
    // chunked terminator): those bytes and the client's terminator go out in one write, not two
    // (one syscall and one packet less per request; a short request's largest single cost).
    // Measuring still waits until they are written.
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
    this.#idle.clear()
    this.flush()
    this.#upstreamDone = true
    this.#o.headed()
    const res = this.#res
    // res.writableEnded: the proxy already answered (a refused head, a timeout).
    if (res.destroyed || res.writableEnded) return
    if (res.headersSent) {
      // Mid-stream failure: the client must see a broken stream, never a clean end.
      const code = codeOf(err)
      // undici's own body timeout is off on tokentap's agents; a dispatcher passed in may still have one.
      if (code === 'UND_ERR_BODY_TIMEOUT') this.#ex.fail('TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', code)
      else if (err instanceof TokentapError) this.#ex.fail(err.code)
      else this.#ex.fail('TOKENTAP_ERR_UPSTREAM_RESET', code || err.message)
      res.destroy()
      return
    }
    this.#o.fail(errorBeforeHeaders(err, this.#o.upstream))
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
      // Node's res.write corks the socket and only writes on the next tick (connectionCorkNT in
      // node:_http_outgoing), which would make the client's bytes wait for the parse after this.
      // The chunk is complete (size line, data, CRLF), so it goes to the kernel now; the later
      // uncork finds nothing corked and does nothing.
      if (uncork) res.socket?.uncork()
    }
    return chunk
  }

  /**
   * The upstream went silent for `idle_timeout_ms` after the head or a read: a broken stream for
   * the client (the head is out, so no error answer), the upstream request stopped.
   */
  #idleTimeout(): void {
    const err = new TokentapError('TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', this.#o.upstream.idle_timeout_ms)
    this.#ex.fail(err.code)
    this.abort(err)
    this.#res.destroy()
  }

  #wait(c: Dispatcher.DispatchController): void {
    c.pause()
    this.#idle.pause()
    if (this.#waiting) return
    this.#waiting = true
    this.#waitFrom = this.#o.now()
    this.#res.once('drain', this.#resume)
  }
}
