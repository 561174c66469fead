import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { TokentapError } from '../errors.ts'
import type { Config } from '../config/schema.ts'
import { ClientWriter, errorBeforeHeaders } from './client-writer.ts'
import { sendError } from './error-answer.ts'
import { BodyInHand, sendRequestBody } from './request-body-strategy.ts'
import { hasBody } from './request-body.ts'
import type { OutgoingRequest } from './request-body-strategy.ts'
import { acceptsTrailers } from './server-timing.ts'
import type { Exchange } from './exchange.ts'
import type { ExchangeOpener } from './open-exchange.ts'
import { HeadersDeadline } from './headers-deadline.ts'
import type { Upstream } from './upstream.ts'
import { withoutHeader } from './headers.ts'
import { traceparentOf } from './trace-context.ts'
import { sampledAtStart } from '../timing/trace-sampling.ts'

/**
 * The byte path of one request: the body goes upstream by its strategy
 * (request-body-strategy.ts), the answer comes back through a ClientWriter (client-writer.ts)
 * read by read, with backpressure both ways; the exchange is finished on the response's
 * `close`, which also comes when the client aborts, as ended when its last byte was written.
 */

export interface ForwardOptions {
  readonly dispatcher: Dispatcher
  readonly upstream: Upstream
  readonly config: Config
  /** Path and query to request upstream (prefix already stripped). */
  readonly pathAndQuery: string
  /** The route's `inject_usage`: add `stream_options.include_usage` where the client set none (inject-usage.ts). */
  readonly injectUsage?: boolean
  /** The clock (`opener.now`), and where the exchange is finished once the response closed (off the socket callback). */
  readonly opener: ExchangeOpener
  /** Headers the embedding app set on the reply before the proxy took it over (app-headers.ts). */
  readonly appHeaders?: readonly string[]
}

/** Ends the request with a proxy error answer (or a cut connection once the response started). */
function failRequest(ex: Exchange, res: ServerResponse, err: TokentapError, appHeaders: readonly string[] | undefined): void {
  ex.fail(err.code, err.detail)
  // The rest of a body over the limit (or stalled) is never read: close the connection after the answer.
  if (err.code === 'TOKENTAP_ERR_BODY_TOO_LARGE' || err.code === 'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT') res.shouldKeepAlive = false
  const started = res.headersSent
  const bytes = sendError(res, err, appHeaders)
  if (!started) ex.answered(err.httpStatus, bytes)
}

export function forward(ex: Exchange, req: IncomingMessage, res: ServerResponse, opts: ForwardOptions): void {
  const { config, opener } = opts
  const now = opener.now
  const fail = (err: TokentapError): void => failRequest(ex, res, err, opts.appHeaders)
  let writer: ClientWriter | undefined
  let totalTimer: NodeJS.Timeout | undefined
  const headersDeadline = new HeadersDeadline(config.upstream.headers_timeout_ms, () => {
    const err = new TokentapError('TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', config.upstream.headers_timeout_ms)
    writer?.abort(err)
    if (!res.headersSent) fail(err)
  })

  // A body that stops half-way would pin the upstream connection (or wait for ever): nothing for
  // client_body_timeout_ms answers 408 before the answer started, else ends both sides.
  const bodyMs = config.server.client_body_timeout_ms
  let bodyTimer: NodeJS.Timeout | undefined
  if (bodyMs > 0 && hasBody(req) && !req.complete) {
    bodyTimer = setTimeout(() => {
      const err = new TokentapError('TOKENTAP_ERR_CLIENT_BODY_TIMEOUT', bodyMs)
      ex.fail(err.code)
      writer?.abort(err)
      if (res.headersSent) res.destroy()
      else fail(err)
    }, bodyMs)
    bodyTimer.unref()
    req.once('end', () => clearTimeout(bodyTimer))
  }
  const touched = bodyTimer === undefined ? undefined : (): void => void bodyTimer?.refresh()

  // 'close' comes once: a plain listener, not a once wrapper.
  res.on('close', () => {
    if (bodyTimer !== undefined) clearTimeout(bodyTimer)
    headersDeadline.clear()
    writer?.responseClosed()
    if (totalTimer !== undefined) clearTimeout(totalTimer)
    const clientGone = !res.writableFinished
    if (clientGone && writer !== undefined && !writer.upstreamDone) writer.abort(new TokentapError('TOKENTAP_ERR_CLIENT_GONE'))
    opener.finish(ex, clientGone, writer?.lastByteAt)
  })

  if (config.upstream.total_timeout_ms > 0) {
    totalTimer = setTimeout(() => {
      const err = new TokentapError('TOKENTAP_ERR_UPSTREAM_TIMEOUT', config.upstream.total_timeout_ms)
      ex.fail(err.code)
      writer?.abort(err)
      if (res.headersSent) res.destroy()
      else fail(err)
    }, config.upstream.total_timeout_ms)
    totalTimer.unref()
  }

  const traces = config.otel.traces
  const send = (r: OutgoingRequest): void => {
    let headers = r.headers
    // `propagate`: the upstream call becomes a child of tokentap's span (its ids exist from the start).
    if (traces?.propagate === true && ex.trace !== undefined) {
      headers = withoutHeader(headers, 'traceparent')
      headers.push('traceparent', traceparentOf(ex.trace, sampledAtStart(ex.trace, traces.sample.ratio)))
    }
    writer = new ClientWriter(ex, res, {
      upstream: config.upstream,
      now,
      injected: r.injected,
      fail,
      echoRequestId: ex.route.echoRequestId === true,
      trailers: ex.route.serverTiming === true && req.httpVersion === '1.1' && acceptsTrailers(req.headers.te as string | undefined),
      req,
      headed: () => headersDeadline.clear(),
      appHeaders: opts.appHeaders,
    })
    // The headers timeout runs from when the request is out whole (undici's own, coarser timer
    // stays the backstop while a streamed body is still being written).
    if (r.body === null || r.body instanceof BodyInHand) headersDeadline.start()
    else req.once('end', () => headersDeadline.start())
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
      fail(errorBeforeHeaders(err as Error, config.upstream))
    }
  }

  sendRequestBody(ex, req, { limit: config.server.body_limit_bytes, injectUsage: opts.injectUsage === true, gone: () => res.destroyed, send, fail, touched })
}
