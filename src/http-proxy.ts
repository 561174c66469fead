import type { IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { Readable, Transform } from 'node:stream'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { RouteConfig } from './config/schema.ts'
import { TokentapError } from './errors.ts'
import type { Exchange } from './proxy/exchange.ts'
import { proxyRoute } from './proxy/open-exchange.ts'
import { gatewayStatusFailure, upstreamFailure } from './proxy/upstream-errors.ts'
import { declaredLength } from './proxy/request-body.ts'
import type { RouteSlo } from './timing/slo.ts'

/**
 * tokentap's tap for `@fastify/http-proxy` (and `@fastify/reply-from`): pass the result as `replyOptions` and those
 * requests are measured like tokentap's own routes; the answer reaches the client through one Transform that passes
 * each read on before measuring it.
 *
 *   await app.register(tokentap, { routes: [] })
 *   await app.register(httpProxy, { prefix: '/openai', upstream: 'https://api.openai.com',
 *     replyOptions: tokentapReplyOptions(app, { prefix: '/openai', provider: 'openai' }) })
 */

export interface HttpProxyTapOptions {
  /** The http-proxy registration's `prefix` (stripped before provider detection, as tokentap's routes do). */
  readonly prefix: string
  /** The provider (default `auto`: detected from path and response). */
  readonly provider?: RouteConfig['provider']
  /** The `route` label (default: the prefix). */
  readonly name?: string
  readonly slo?: RouteSlo
}

/** What reply-from passes as `res` to `onResponse`. */
interface UpstreamResponse {
  readonly statusCode: number
  readonly headers: IncomingHttpHeaders
  readonly stream: Readable
}

/** Any server's request and reply (reply-from types them for HTTP/1 and HTTP/2 alike; this tap serves HTTP/1). */
// biome-ignore lint/suspicious/noExplicitAny: reply-from's hook types are generic over every server type.
type AnyRequest = FastifyRequest<any, any, any>
// biome-ignore lint/suspicious/noExplicitAny: as above.
type AnyReply = FastifyReply<any, any, any>

/** reply-from's `replyOptions` subset this helper fills in. */
export interface TokentapReplyOptions {
  readonly rewriteRequestHeaders: (request: AnyRequest, headers: IncomingHttpHeaders) => IncomingHttpHeaders
  // biome-ignore lint/suspicious/noExplicitAny: reply-from passes its own response type.
  readonly onResponse: (request: AnyRequest, reply: AnyReply, res: any) => void
  readonly onError: (reply: AnyReply, error: { error: Error & { statusCode?: number; code?: string } }) => void
}

const header = (h: IncomingHttpHeaders, name: string): string | undefined => {
  const v = h[name]
  return Array.isArray(v) ? v[0] : v
}

/**
 * The request's bytes_in, counted by a `data` listener beside reply-from's; paused first so it does not start the flow
 * before reply-from's consumer is attached. A body another parser already read counts by its Content-Length.
 */
function countBody(ex: Exchange, body: unknown, req: IncomingMessage): void {
  const watch = { model: undefined, bytes: 0 }
  ex.bodyStreaming(watch)
  if (body instanceof Readable) {
    body.pause()
    body.on('data', (chunk: Buffer) => {
      watch.bytes += chunk.length
    })
    return
  }
  const declared = declaredLength(req)
  if (declared !== undefined) watch.bytes = declared
}

export function tokentapReplyOptions(
  // biome-ignore lint/suspicious/noExplicitAny: any Fastify instance the plugin was registered on (its logger type varies).
  app: FastifyInstance<any, any, any, any, any>,
  options: HttpProxyTapOptions,
): TokentapReplyOptions {
  const state = app.tokentap
  if (state === undefined) throw new TokentapError('TOKENTAP_ERR_PLUGIN_MISSING', 'tokentapReplyOptions')
  const { opener } = state
  const now = opener.now
  const route = proxyRoute(options)
  const started = new WeakMap<IncomingMessage, { tReq: number; reply: AnyReply }>()
  const exchanges = new WeakMap<IncomingMessage, Exchange>()

  app.addHook('onRequest', (request: AnyRequest, reply: AnyReply, done: () => void) => {
    if (opener.owns(route, request.raw.url ?? '/')) started.set(request.raw, { tReq: now(), reply })
    done()
  })

  return {
    rewriteRequestHeaders(request, headers) {
      const req = request.raw as IncomingMessage
      const start = started.get(req)
      if (start === undefined) return headers
      const { ex } = opener.open(route, req, req.url ?? '/', start.tReq)
      exchanges.set(req, ex)
      countBody(ex, (request as { body?: unknown }).body, req)
      opener.finishOnClose(ex, start.reply.raw)
      ex.requestSent(now())
      return headers
    },
    onResponse(request, reply, upstream) {
      const res = upstream as UpstreamResponse
      const ex = exchanges.get(request.raw as IncomingMessage)
      if (ex === undefined) {
        void reply.send(res.stream)
        return
      }
      ex.responseStarted(
        res.statusCode,
        header(res.headers, 'content-type'),
        header(res.headers, 'content-encoding'),
        now(),
        header(res.headers, 'x-request-id'),
        (name) => header(res.headers, name),
      )
      // After the client left, the upstream stream is destroyed on purpose (below): not a failure.
      res.stream.once('error', (err: Error) => {
        if (reply.raw.destroyed) return
        const failure = upstreamFailure(err, true, undefined)
        ex.fail(failure.code, failure.detail)
      })
      const tap = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          const at = now()
          // The read goes on to the client first; measuring comes after, on the same bytes.
          callback(null, chunk)
          ex.data(chunk, at, now())
        },
      })
      res.stream.once('error', (err) => tap.destroy(err))
      // `pipe` would not pass on Fastify's destroy when the client leaves, and the upstream answer would be read to its
      // end; dropping it is what reply-from does with its own stream (no 'error': the exchange stays `cancelled`).
      tap.once('close', () => {
        if (!res.stream.readableEnded) res.stream.destroy()
      })
      void reply.send(res.stream.pipe(tap))
    },
    onError(reply, { error }) {
      const ex = exchanges.get(reply.request.raw as IncomingMessage)
      if (ex !== undefined) {
        ex.fail(gatewayStatusFailure(error.statusCode), error.code)
        ex.answered(error.statusCode ?? 502, 0)
      }
      void reply.send(error)
    },
  }
}
