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
 * head and body in one syscall instead of pulling an async iterator chunk by chunk. undici keeps
 * that buffer until the response ends, so the bound is also what a long stream holds for it.
 */
const WHOLE_BODY_BYTES = 16 * 1024

export interface OutgoingRequest {
  readonly headers: string[]
  /** undici streams an async iterable body with backpressure (its writeIterable path). */
  readonly body: AsyncIterable<Buffer> | Buffer | null
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
}

const tooLarge = (limit: number) => (): TokentapError => new TokentapError('TOKENTAP_ERR_BODY_TOO_LARGE', limit)

function streamed(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  let body: AsyncIterable<Buffer> | null = null
  if (hasBody(req)) {
    const watched = watchBody(req, o.limit, tooLarge(o.limit))
    body = watched.body
    ex.bodyStreaming(watched.watch)
  }
  o.send({ headers: upstreamRequestHeaders(req.rawHeaders), body, injected: false })
}

function whole(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  readBody(req, o.limit, (err, raw) => {
    if (o.gone()) return
    if (err !== undefined) {
      o.fail(err)
      return
    }
    ex.bodyRead(sniffModel(raw), raw.length)
    o.send({ headers: upstreamRequestHeaders(req.rawHeaders), body: raw, injected: false })
  })
}

function usageInjected(ex: Exchange, req: IncomingMessage, o: BodyOptions): void {
  readBody(req, o.limit, (err, raw) => {
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
    o.send({ headers, body: prepared.body, injected: prepared.injected })
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
