import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Dispatcher } from 'undici'
import { TokentapError } from '../errors.ts'
import type { Config } from '../config/schema.ts'
import { clientResponseHeaders, rawHeader, upstreamRequestHeaders } from './headers.ts'
import { declaredLength, hasBody, readBody, sniffModel, watchBody } from './request-body.ts'
import { mayInject, prepareBody, UsageChunkFilter } from './inject-usage.ts'
import type { Exchange } from './exchange.ts'

/**
 * The byte path: one upstream request per client request through a pooled undici Agent,
 * the response written to the client read by read as it arrives (no buffering), with
 * backpressure both ways. The exchange gets a copy of each read after it was written.
 */

export interface Upstream {
  /** `https://host:port` */
  readonly origin: string
  /** Path prefix on the upstream (`/api` for `https://host/api`), '' for none. */
  readonly basePath: string
}

export function parseUpstream(url: string): Upstream {
  const u = new URL(url)
  return { origin: u.origin, basePath: u.pathname.replace(/\/+$/, '') }
}

/**
 * A body of at most this many declared bytes is read whole before the upstream request starts.
 * Such a body comes with the headers or just after them, so nothing waits; undici then writes
 * head and body in one syscall instead of pulling an async iterator chunk by chunk. undici keeps
 * that buffer until the response ends, so the bound is also what a long stream holds for it.
 */
const WHOLE_BODY_BYTES = 16 * 1024

const CONNECT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ECONNRESET_BEFORE_HEADERS'])

/** Maps an upstream failure before response headers to the error the client gets. */
function errorFor(err: Error, config: Config['upstream']): TokentapError {
  if (err instanceof TokentapError) return err
  const e = err as Error & { code?: string; cause?: { code?: string } }
  const code = e.code ?? e.cause?.code ?? ''
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return new TokentapError('TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', config.headers_timeout_ms)
  if (CONNECT_CODES.has(code)) return new TokentapError('TOKENTAP_ERR_UPSTREAM_CONNECT', code)
  return new TokentapError('TOKENTAP_ERR_UPSTREAM_FAILED', code || err.message)
}

/** Writes a proxy error as JSON, once, if the response has not started; else breaks the connection. */
export function sendError(res: ServerResponse, err: TokentapError): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  const body = err.toBody()
  res.writeHead(err.statusCode, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

/** A flat raw header list without the (lower-case) name. */
function withoutHeader(raw: readonly string[], lowerName: string): string[] {
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) if (raw[i].toLowerCase() !== lowerName) out.push(raw[i], raw[i + 1])
  return out
}

export interface ForwardOptions {
  readonly dispatcher: Dispatcher
  readonly upstream: Upstream
  readonly config: Config
  /** Path and query to request upstream (prefix already stripped). */
  readonly pathAndQuery: string
  /** The route's `inject_usage`: add `stream_options.include_usage` where the client set none (inject-usage.ts). */
  readonly injectUsage?: boolean
}

export function forward(ex: Exchange, req: IncomingMessage, res: ServerResponse, opts: ForwardOptions): void {
  const { config, upstream } = opts
  const limit = config.server.body_limit_bytes
  let controller: Dispatcher.DispatchController | undefined
  let upstreamDone = false
  let totalTimer: NodeJS.Timeout | undefined

  const close = (): void => {
    if (totalTimer !== undefined) clearTimeout(totalTimer)
    const clientGone = !res.writableFinished
    if (clientGone && !upstreamDone) controller?.abort(new Error('client closed the connection'))
    ex.finish(performance.now(), clientGone && ex.failure === undefined)
  }
  res.once('close', close)

  const fail = (err: TokentapError): void => {
    ex.failure ??= err.code
    if (ex.statusCode === 0) ex.statusCode = err.statusCode
    // The rest of a body over the limit is never read: close the connection after the answer.
    if (err.code === 'TOKENTAP_ERR_BODY_TOO_LARGE') res.shouldKeepAlive = false
    sendError(res, err)
  }

  const declared = declaredLength(req)
  if (declared !== undefined && declared > limit) {
    // Refuse before a byte goes upstream (not even a connection is opened).
    fail(new TokentapError('TOKENTAP_ERR_BODY_TOO_LARGE', limit))
    req.resume()
    return
  }

  // Requests that may get usage injected, and small ones, are read whole; all others stream through.
  const injecting = opts.injectUsage === true && hasBody(req) && mayInject(req, ex.path)
  const whole = !injecting && declared !== undefined && declared > 0 && declared <= WHOLE_BODY_BYTES
  /** Set when usage was injected and the response is an SSE stream to take the usage chunk out of. */
  let filter: UsageChunkFilter | undefined
  let injected = false
  let body: AsyncIterable<Buffer> | null = null
  if (hasBody(req) && !injecting && !whole) {
    const watched = watchBody(req, limit, () => new TokentapError('TOKENTAP_ERR_BODY_TOO_LARGE', limit))
    body = watched.body
    ex.body = watched.watch
  }

  if (config.upstream.total_timeout_ms > 0) {
    totalTimer = setTimeout(() => {
      const err = new TokentapError('TOKENTAP_ERR_UPSTREAM_TIMEOUT', config.upstream.total_timeout_ms)
      ex.failure ??= err.code
      controller?.abort(err)
      if (res.headersSent) res.destroy()
      else fail(err)
    }, config.upstream.total_timeout_ms)
    totalTimer.unref()
  }

  let resume: (() => void) | undefined
  let waiting = false
  const wait = (c: Dispatcher.DispatchController): void => {
    c.pause()
    if (waiting) return
    waiting = true
    resume ??= () => {
      waiting = false
      c.resume()
    }
    res.once('drain', resume)
  }
  // One socket read reaches onResponseData as many calls, one per HTTP chunk of a chunked body
  // (one per SSE event for most servers). They are gathered and written once at the end of the
  // same tick (a microtask: no added wait), so the client gets one write and the tap one push
  // per read, which is also when their bytes arrived.
  let pending: Buffer[] = []
  let pendingAt = 0
  const flush = (): void => {
    const n = pending.length
    if (n === 0) return
    const chunk = n === 1 ? pending[0] : Buffer.concat(pending)
    pending = []
    if (res.destroyed) return
    // With usage injection the client gets the stream less the added usage chunk; the tap still
    // sees every upstream byte.
    const out = filter === undefined ? chunk : filter.push(chunk)
    if (out.length > 0) {
      if (!res.write(out) && controller !== undefined) wait(controller)
      // Node's res.write corks the socket and only writes on the next tick (connectionCorkNT in
      // node:_http_outgoing), which would make the client's bytes wait for the parse below. The
      // chunk is complete (size line, data, CRLF), so it goes to the kernel now; the later uncork
      // finds nothing corked and does nothing.
      res.socket?.uncork()
    }
    ex.data(chunk, pendingAt)
  }
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c
      if (res.destroyed) c.abort(new Error('client closed the connection'))
    },
    onResponseStart(c, statusCode, _headers, statusMessage) {
      const at = performance.now()
      if (res.destroyed) return
      const unwrapped = c as unknown as { rawHeaders: Buffer[] | null }
      let raw = clientResponseHeaders(unwrapped.rawHeaders ?? [])
      // undici's header Buffers are views of the socket read they came in, often with the first
      // body bytes (up to 64 KiB): the controller would keep that read alive for the whole stream.
      unwrapped.rawHeaders = null
      ex.responseStarted(statusCode, rawHeader(raw, 'content-type'), rawHeader(raw, 'content-encoding'), at, rawHeader(raw, 'x-request-id'))
      if (injected && statusCode >= 200 && statusCode < 300 && /^text\/event-stream/i.test(rawHeader(raw, 'content-type') ?? '') && rawHeader(raw, 'content-encoding') === undefined) {
        filter = new UsageChunkFilter()
        raw = withoutHeader(raw, 'content-length') // the client gets fewer bytes than the upstream sent
      }
      try {
        res.writeHead(statusCode, statusMessage || undefined, raw)
      } catch (err) {
        // Headers Node will not send (invalid characters): the client gets a clear 502.
        ex.statusCode = 0
        c.abort(err as Error)
        fail(new TokentapError('TOKENTAP_ERR_UPSTREAM_FAILED', `invalid response header: ${(err as Error).message}`))
        return
      }
      // Send headers within this tick: an SSE client should see the response start before the
      // first event. When body bytes came in the same read, they go out with the headers in one
      // write instead (the data flush is queued after this one).
      queueMicrotask(() => {
        if (pending.length === 0 && !res.headersSent && !res.destroyed) res.flushHeaders()
      })
    },
    onResponseData(c, chunk) {
      if (res.destroyed) return
      if (pending.length === 0) {
        pendingAt = performance.now()
        queueMicrotask(flush)
      }
      pending.push(chunk)
      // The client is already behind: stop reading now, not only after this read is written.
      if (res.writableNeedDrain) wait(c)
    },
    onResponseEnd() {
      flush()
      upstreamDone = true
      if (filter !== undefined) res.end(filter.end())
      else res.end()
    },
    onResponseError(_c, err) {
      flush()
      upstreamDone = true
      if (res.destroyed) return
      if (res.headersSent) {
        // Mid-stream failure: the client must see a broken stream, never a clean end.
        ex.failure ??= (err as { code?: string }).code ?? 'UPSTREAM_RESET'
        res.destroy()
        return
      }
      fail(errorFor(err, config.upstream))
    },
  }

  const send = (headers: string[], sendBody: AsyncIterable<Buffer> | Buffer | null): void => {
    try {
      opts.dispatcher.dispatch(
        {
          origin: upstream.origin,
          path: upstream.basePath + opts.pathAndQuery,
          method: req.method as Dispatcher.HttpMethod,
          headers,
          // undici streams an async iterable body with backpressure (its writeIterable path).
          body: sendBody as unknown as Dispatcher.DispatchOptions['body'],
        },
        handler,
      )
    } catch (err) {
      fail(errorFor(err as Error, config.upstream))
    }
  }

  if (whole) {
    readBody(req, limit).then(
      (raw) => {
        if (res.destroyed) return
        ex.body = { model: sniffModel(raw), bytes: raw.length }
        send(upstreamRequestHeaders(req.rawHeaders), raw)
      },
      (err: TokentapError) => {
        if (!res.destroyed) fail(err)
      },
    )
    return
  }
  if (!injecting) {
    send(upstreamRequestHeaders(req.rawHeaders), body)
    return
  }
  readBody(req, limit).then(
    (raw) => {
      if (res.destroyed) return
      const prepared = prepareBody(raw)
      ex.body = { model: prepared.model, bytes: raw.length }
      let headers = withoutHeader(upstreamRequestHeaders(req.rawHeaders), 'content-length')
      headers.push('content-length', String(prepared.body.length))
      if (prepared.injected) {
        // An encoded answer could not have its usage chunk taken out: ask for it plain.
        headers = withoutHeader(headers, 'accept-encoding')
        headers.push('accept-encoding', 'identity')
        injected = true
        ex.usageInjected()
      }
      send(headers, prepared.body)
    },
    (err: TokentapError) => {
      if (err.code === 'TOKENTAP_ERR_BODY_TOO_LARGE') res.shouldKeepAlive = false
      if (!res.destroyed) fail(err)
    },
  )
}
