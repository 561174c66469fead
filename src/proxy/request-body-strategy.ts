import type { IncomingMessage } from 'node:http'
import { TokentapError } from '../errors.ts'
import { upstreamRequestHeaders, withoutHeader } from './headers.ts'
import { mayInject, prepareBody } from './inject-usage.ts'
import { declaredLength, hasBody, readBody, sniffModel, watchBody } from './request-body.ts'
import type { Exchange } from './exchange.ts'

/**
 * How a request's body goes upstream, one strategy each:
 * - `whole`: a small body (declared length ≤ 16 KiB) is read first and sent with the head in
 *   one write;
 * - `usage-injected`: a streaming chat request on a route with `inject_usage` is read whole,
 *   given `stream_options.include_usage`, and sent with its new length (inject-usage.ts);
 * - `streamed`: everything else streams through as it comes, counted against the limit.
 * Each ends in `send` (the head and body to dispatch) or `fail` (an error for the client).
 */

/**
 * A body of at most this many declared bytes is read whole before the upstream request starts.
 * Such a body comes with the headers or just after them, so nothing waits; undici then writes
 * head and body in one syscall instead of pulling the client's stream chunk by chunk.
 */
const WHOLE_BODY_BYTES = 16 * 1024

/**
 * A body in hand, given to undici as an iterable of itself that lets go of the buffer as undici
 * takes it. undici keeps a request's `body` (in the request and in its abort closure) until the
 * response ends: a Buffer body stayed in memory for as long as the answer streamed (the bench's
 * 4.9 KiB on every open stream). Its one chunk still goes out with the head in one write (undici
 * corks the socket for an iterable's first chunk), and no later than a Buffer would: in the same
 * tick, after a microtask.
 */
export class BodyInHand implements Iterable<Buffer>, Iterator<Buffer> {
  #body: Buffer | undefined

  constructor(body: Buffer) {
    this.#body = body
  }

  [Symbol.iterator](): Iterator<Buffer> {
    return this
  }

  next(): IteratorResult<Buffer> {
    const body = this.#body
    if (body === undefined) return { done: true, value: undefined }
    this.#body = undefined
    return { done: false, value: body }
  }
}

/** An empty body is no body (what undici makes of an empty Buffer). */
const inHand = (body: Buffer): BodyInHand | null => (body.length === 0 ? null : new BodyInHand(body))

export interface OutgoingRequest {
  readonly headers: string[]
  /**
   * The client's stream, which undici reads with backpressure (its writeIterable path), or a
   * body read whole; the headers timeout starts once the request is out whole.
   */
  readonly body: AsyncIterable<Buffer> | BodyInHand | null
  /** `include_usage` was added: the response's added usage chunk must not reach the client. */
  readonly injected: boolean
}

export interface BodyOptions {
  readonly limit: number
  readonly injectUsage: boolean
  /** Whether the client is gone (then nothing is sent). */
  readonly gone: () => boolean
  readonly send: (r: OutgoingRequest) => void
  readonly fail: (err: TokentapError) => void
  /** Body bytes came from the client (re-arms the client body timeout). */
  readonly touched?: () => void
}

const tooLarge = (limit: number) => (): TokentapError => new TokentapError('TOKENTAP_ERR_BODY_TOO_LARGE', limit)

function streamed(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  let body: AsyncIterable<Buffer> | null = null
  if (hasBody(req)) {
    const watched = watchBody(req, o.limit, tooLarge(o.limit), o.touched)
    body = watched.body
    ex.bodyStreaming(watched.watch)
  }
  o.send({ headers: upstreamRequestHeaders(req.rawHeaders), body, injected: false })
}

function whole(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  readBody(req, o.limit, o.touched, (err, raw) => {
    if (o.gone()) return
    if (err !== undefined) {
      o.fail(err)
      return
    }
    ex.bodyRead(sniffModel(raw), raw.length)
    o.send({ headers: upstreamRequestHeaders(req.rawHeaders), body: inHand(raw), injected: false })
  })
}

function usageInjected(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  readBody(req, o.limit, o.touched, (err, raw) => {
    if (o.gone()) return
    if (err !== undefined) {
      o.fail(err)
      return
    }
    const prepared = prepareBody(raw)
    ex.bodyRead(prepared.model, raw.length)
    let headers = withoutHeader(upstreamRequestHeaders(req.rawHeaders), 'content-length')
    headers.push('content-length', String(prepared.body.length))
    if (prepared.injected) {
      // An encoded answer could not have its usage chunk taken out: ask for it plain.
      headers = withoutHeader(headers, 'accept-encoding')
      headers.push('accept-encoding', 'identity')
      ex.usageInjected()
    }
    o.send({ headers, body: inHand(prepared.body), injected: prepared.injected })
  })
}

/**
 * Refuses a body declared over the limit before a byte goes upstream (not even a connection is
 * opened), else sends the request upstream by the strategy that fits it.
 */
export function sendRequestBody(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  const declared = declaredLength(req)
  if (declared !== undefined && declared > o.limit) {
    o.fail(tooLarge(o.limit)())
    req.resume()
    return
  }
  if (o.injectUsage && hasBody(req) && mayInject(req, ex.path)) usageInjected(ex, req, o)
  else if (declared !== undefined && declared > 0 && declared <= WHOLE_BODY_BYTES) whole(ex, req, o)
  else streamed(ex, req, o)
}
