import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { TokentapError } from '../errors.ts'
import type { Config } from '../config/schema.ts'
import { ClientWriter } from './client-writer.ts'
import { Deadline, Deadlines } from './deadlines.ts'
import { upstreamFailure } from './upstream-errors.ts'
import { sendError } from './error-answer.ts'
import { BodyInHand, sendRequestBody } from './request-body-strategy.ts'
import { hasBody } from './request-body.ts'
import type { OutgoingRequest } from './request-body-strategy.ts'
import { acceptsTrailers } from './server-timing.ts'
import type { Exchange } from './exchange.ts'
import type { ExchangeOpener } from './open-exchange.ts'
import type { Upstream } from './upstream.ts'
import { withoutHeader } from './headers.ts'
import { traceparentOf } from '../record/trace-context.ts'
import { sampledAtStart } from '../timing/trace-sampling.ts'

/**
 * The byte path of one request, with backpressure both ways; the exchange finishes on the
 * response's `close` (which also comes on a client abort), as ended when its last byte was written.
 */

export interface ForwardOptions {
  readonly dispatcher: Dispatcher
  readonly upstream: Upstream
  readonly config: Config
  readonly pathAndQuery: string
  readonly injectUsage?: boolean
  /** The exchange is finished off the socket callback. */
  readonly opener: ExchangeOpener
  readonly appHeaders?: readonly string[]
}

function expiryError(kind: Deadline, config: Config): TokentapError {
  if (kind === Deadline.headers)
    return new TokentapError('TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', config.upstream.headers_timeout_ms)
  if (kind === Deadline.body)
    return new TokentapError('TOKENTAP_ERR_CLIENT_BODY_TIMEOUT', config.server.client_body_timeout_ms)
  if (kind === Deadline.total)
    return new TokentapError('TOKENTAP_ERR_UPSTREAM_TIMEOUT', config.upstream.total_timeout_ms)
  return new TokentapError('TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', config.upstream.idle_timeout_ms)
}

export function forward(ex: Exchange, req: IncomingMessage, res: ServerResponse, opts: ForwardOptions): void {
  const { config, opener } = opts
  const now = opener.now
  let writer: ClientWriter | undefined
  let ended = false
  /**
   * Ends a request on a proxy error, once: an error answer before any byte of the response, else a
   * cut connection. Aborting upstream calls back here at once, and that call only records.
   */
  const end = (err: TokentapError): void => {
    ex.fail(err.code, err.detail)
    if (ended) return
    ended = true
    deadlines.clearAll()
    writer?.abort(err)
    // The rest of a body over the limit (or stalled) is never read: close the connection after the answer.
    if (err.code === 'TOKENTAP_ERR_BODY_TOO_LARGE' || err.code === 'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT')
      res.shouldKeepAlive = false
    const started = res.headersSent
    const bytes = sendError(res, err, opts.appHeaders)
    if (!started) ex.answered(err.httpStatus, bytes)
  }

  const bodyWatched = config.server.client_body_timeout_ms > 0 && hasBody(req) && !req.complete
  const deadlines = new Deadlines(
    {
      headers: config.upstream.headers_timeout_ms,
      // A body that stops half-way would pin the upstream connection (or wait for ever).
      body: bodyWatched ? config.server.client_body_timeout_ms : 0,
      total: config.upstream.total_timeout_ms,
      idle: config.upstream.idle_timeout_ms,
    },
    (kind) => end(expiryError(kind, config)),
  )
  deadlines.start(Deadline.total)
  if (bodyWatched) {
    deadlines.start(Deadline.body)
    req.once('end', () => deadlines.clear(Deadline.body))
  }
  const touched = bodyWatched ? (): void => deadlines.touch(Deadline.body) : undefined

  res.on('close', () => {
    deadlines.clearAll()
    writer?.responseClosed()
    const clientGone = !res.writableFinished
    if (clientGone && writer !== undefined && !writer.upstreamDone)
      writer.abort(new TokentapError('TOKENTAP_ERR_CLIENT_GONE'))
    opener.finish(ex, clientGone, writer?.lastByteAt)
  })

  const traces = config.otel.traces
  const send = (r: OutgoingRequest): void => {
    let headers = r.headers
    // The upstream call becomes a child of tokentap's span (trace-context.ts).
    if (traces?.propagate === true && ex.trace !== undefined) {
      headers = withoutHeader(headers, 'traceparent')
      headers.push('traceparent', traceparentOf(ex.trace, sampledAtStart(ex.trace, traces.sample.ratio)))
    }
    writer = new ClientWriter(ex, res, {
      upstream: config.upstream,
      now,
      injected: r.injected,
      fail: end,
      deadlines,
      echoRequestId: ex.route.echoRequestId === true,
      trailers:
        ex.route.serverTiming === true &&
        req.httpVersion === '1.1' &&
        acceptsTrailers(req.headers.te as string | undefined),
      req,
      appHeaders: opts.appHeaders,
    })
    // From when the request is out whole; undici's coarser timer stays the backstop while a body streams.
    if (r.body === null || r.body instanceof BodyInHand) deadlines.start(Deadline.headers)
    else req.once('end', () => deadlines.start(Deadline.headers))
    try {
      opts.dispatcher.dispatch(
        {
          origin: opts.upstream.origin,
          path: opts.upstream.basePath + opts.pathAndQuery,
          method: req.method as Dispatcher.HttpMethod,
          headers,
          body: r.body as unknown as Dispatcher.DispatchOptions['body'],
        },
        writer,
      )
    } catch (err) {
      end(upstreamFailure(err as Error, false, config.upstream))
    }
  }

  sendRequestBody(ex, req, {
    limit: config.server.body_limit_bytes,
    injectUsage: opts.injectUsage === true,
    gone: () => res.destroyed,
    send,
    fail: end,
    touched,
  })
}
