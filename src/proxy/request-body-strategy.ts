import type { IncomingMessage } from 'node:http'
import { TokentapError } from '../errors.ts'
import { upstreamRequestHeaders, withoutHeader } from './headers.ts'
import { mayInject, prepareBody } from './inject-usage.ts'
import { declaredLength, hasBody, readBody, sniffModel, watchBody } from './request-body.ts'
import type { Exchange } from './exchange.ts'

/**
 * How a request's body goes upstream: `whole` (small, sent with the head in one write),
 * `usage-injected` (read whole and given `stream_options.include_usage`, inject-usage.ts) or
 * `streamed` (counted against the limit as it passes); each ends in `send` or `fail`.
 */

/** Such a body arrives with the headers or just after them, so reading it first delays nothing and saves syscalls. */
const WHOLE_BODY_BYTES = 16 * 1024

/**
 * A body given to undici as an iterable that lets go of its buffer once taken: undici keeps a
 * request's `body` until the response ends, so a Buffer would stay in memory for the whole stream.
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

/** What undici makes of an empty Buffer. */
const inHand = (body: Buffer): BodyInHand | null => (body.length === 0 ? null : new BodyInHand(body))

export interface OutgoingRequest {
  readonly headers: string[]
  /** The headers timeout starts once the request is out whole. */
  readonly body: AsyncIterable<Buffer> | BodyInHand | null
  readonly injected: boolean
}

export interface BodyOptions {
  readonly limit: number
  readonly injectUsage: boolean
  readonly gone: () => boolean
  readonly send: (r: OutgoingRequest) => void
  readonly fail: (err: TokentapError) => void
  /** Re-arms the client body timeout. */
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
      // An encoded answer's usage chunk could not be taken out.
      headers = withoutHeader(headers, 'accept-encoding')
      headers.push('accept-encoding', 'identity')
      ex.usageInjected()
    }
    o.send({ headers, body: inHand(prepared.body), injected: prepared.injected })
  })
}

/** A body declared over the limit is refused before a connection is even opened. */
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
