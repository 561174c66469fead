import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Dispatcher } from 'undici'
import type { Config } from '../config/schema.ts'
import { TokentapError } from '../errors.ts'
import { sendError } from '../proxy/error-answer.ts'
import { Deadline, Deadlines } from '../proxy/deadlines.ts'
import { upstreamFailure } from '../proxy/upstream-errors.ts'
import { clientResponseHeaders, rawHeader, upstreamRequestHeaders } from '../proxy/headers.ts'
import { writeResponseHead } from '../proxy/response-head.ts'
import type { Upstream } from '../proxy/upstream.ts'
import { negotiatedDeflate } from './permessage-deflate.ts'
import { WebSocketRelay } from './relay.ts'
import type { ProxyCloseReason } from './relay.ts'
import type { RealtimeSession } from './session.ts'
import type { PendingUpgrade } from './upgrade-listener.ts'

/**
 * The byte path of one WebSocket upgrade: the request goes upstream over the route's dispatcher
 * with its headers as they came (only the hop's own dropped), the 101 comes back and relay.ts
 * copies bytes both ways; a refused upgrade goes back as it came, and no answer in time is a 504.
 */

export interface PassThroughOptions {
  readonly dispatcher: Dispatcher
  readonly upstream: Upstream
  readonly config: Config
  readonly pathAndQuery: string
  readonly now: () => number
  readonly echoRequestId: boolean
  /** So shutting down can close the session. */
  readonly relays: Map<RealtimeSession, WebSocketRelay>
  /** A session whose 101 comes while shutting down is closed (1001) as soon as it opens. */
  readonly draining: () => boolean
}

/** Header names of a 101 that belong to the hop and are not part of the upgrade itself. */
const HOP = new Set(['keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'content-length'])

function switchingHead(raw: readonly string[], extra: readonly string[]): string {
  const listed = new Set<string>()
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].toLowerCase() !== 'connection') continue
    for (const t of raw[i + 1].split(',')) if (t.trim().toLowerCase() !== 'upgrade') listed.add(t.trim().toLowerCase())
  }
  let head = 'HTTP/1.1 101 Switching Protocols\r\n'
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase()
    if (HOP.has(name) || listed.has(name)) continue
    head += `${raw[i]}: ${raw[i + 1]}\r\n`
  }
  for (let i = 0; i < extra.length; i += 2) head += `${extra[i]}: ${extra[i + 1]}\r\n`
  return `${head}\r\n`
}

export function passThrough(
  session: RealtimeSession,
  req: IncomingMessage,
  pending: PendingUpgrade,
  opts: PassThroughOptions,
): void {
  const { config, now } = opts
  const client = pending.socket
  const res = pending.res
  let relay: WebSocketRelay | undefined
  let handler: UpgradeHandler | undefined
  const fail = (err: TokentapError): void => {
    if (client.destroyed) return
    session.failed(err.code, res.headersSent ? 0 : err.httpStatus)
    handler?.abort(err)
    sendError(res, err)
  }
  const { headers_timeout_ms: headers, total_timeout_ms: total, idle_timeout_ms: idle } = config.upstream
  // Before the 101 a deadline ends the upgrade with the proxy's answer; after it, the relay closes with its reason.
  const deadlines = new Deadlines({ headers, total, idle }, (kind) => {
    if (kind === Deadline.idle) relay?.close('idle')
    else if (kind === Deadline.total && relay !== undefined) relay.close('total')
    else if (kind === Deadline.total) fail(new TokentapError('TOKENTAP_ERR_UPSTREAM_TIMEOUT', total))
    else fail(new TokentapError('TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', headers))
  })
  // Before the 101 the session ends with the client's connection; after it, with the relay's.
  const beforeOpen = (): void => {
    deadlines.clearAll()
    handler?.abort(new Error('client closed the connection'))
    session.finish(
      now(),
      handler?.answered === true
        ? { first: 'upstream', abrupt: false }
        : { first: 'client', abrupt: !client.readableEnded },
    )
  }
  client.once('close', beforeOpen)
  deadlines.start(Deadline.total)

  handler = new UpgradeHandler(res, {
    headed: () => deadlines.clear(Deadline.headers),
    refused: (statusCode) => session.refused(statusCode),
    fail,
    upstream: config.upstream,
    open: (raw, upstreamSocket) => {
      if (client.destroyed) {
        upstreamSocket.destroy()
        return
      }
      client.off('close', beforeOpen)
      pending.taken = true
      res.detachSocket(client as never)
      client.write(switchingHead(raw, opts.echoRequestId ? ['x-tokentap-request-id', session.id] : []), 'latin1')
      session.opened(negotiatedDeflate(rawHeader(raw, 'sec-websocket-extensions')))
      const running = new WebSocketRelay(
        client,
        upstreamSocket,
        {
          data: (from, chunk, at) => session.data(from, chunk, at),
          atFrameBoundary: (to) => session.atFrameBoundary(to),
          closed: (end, at) => {
            deadlines.clearAll()
            opts.relays.delete(session)
            session.closed(end, at)
          },
        },
        { deadlines, now },
      )
      relay = running
      opts.relays.set(session, running)
      running.start(pending.head)
      if (opts.draining()) running.close('shutdown')
    },
  })
  deadlines.start(Deadline.headers)
  try {
    opts.dispatcher.dispatch(
      {
        origin: opts.upstream.origin,
        path: opts.upstream.basePath + opts.pathAndQuery,
        method: 'GET',
        headers: upstreamRequestHeaders(req.rawHeaders),
        upgrade: typeof req.headers.upgrade === 'string' ? req.headers.upgrade : 'websocket',
      },
      handler,
    )
  } catch (err) {
    fail(upstreamFailure(err as Error, false, config.upstream))
  }
}

/** Closes every running session with 1001 (going away), for shutting down or a drain deadline. */
export function closeRelays(
  relays: ReadonlyMap<RealtimeSession, WebSocketRelay>,
  reason: ProxyCloseReason,
  which: (session: RealtimeSession) => boolean = () => true,
): void {
  for (const [session, relay] of relays) if (which(session)) relay.close(reason)
}

interface UpgradeHandlerOptions {
  readonly upstream: Config['upstream']
  readonly headed: () => void
  /** `socket`: the upstream connection, now the session's. */
  readonly open: (raw: string[], socket: Duplex) => void
  readonly refused: (statusCode: number) => void
  readonly fail: (err: TokentapError) => void
}

/** undici's dispatch handler for one upgrade request: the 101, or the refused answer relayed read by read. */
class UpgradeHandler implements Dispatcher.DispatchHandler {
  readonly #res: PendingUpgrade['res']
  readonly #o: UpgradeHandlerOptions
  #controller: Dispatcher.DispatchController | undefined
  #answered = false
  #done = false

  constructor(res: PendingUpgrade['res'], options: UpgradeHandlerOptions) {
    this.#res = res
    this.#o = options
  }

  get answered(): boolean {
    return this.#answered
  }

  abort(reason: Error): void {
    if (!this.#done) this.#controller?.abort(reason)
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller
  }

  onRequestUpgrade(
    controller: Dispatcher.DispatchController,
    _statusCode: number,
    _headers: Record<string, string | string[]>,
    socket: Duplex,
  ): void {
    this.#answered = true
    this.#done = true
    this.#o.headed()
    const unwrapped = controller as unknown as { rawHeaders: (Buffer | string)[] | null }
    const raw = (unwrapped.rawHeaders ?? []).map((h) => (typeof h === 'string' ? h : h.toString('latin1')))
    unwrapped.rawHeaders = null
    this.#o.open(raw, socket)
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    _headers: Record<string, string | string[] | undefined>,
    statusMessage?: string,
  ): void {
    // An informational answer before the final one (a 101 goes to onRequestUpgrade instead).
    if (statusCode < 200) return
    this.#answered = true
    this.#o.headed()
    const res = this.#res
    if (res.destroyed) return
    const unwrapped = controller as unknown as { rawHeaders: Buffer[] | null }
    const raw = clientResponseHeaders(unwrapped.rawHeaders ?? [])
    unwrapped.rawHeaders = null
    this.#o.refused(statusCode)
    const refused = writeResponseHead(res, statusCode, statusMessage ?? '', raw)
    if (refused !== undefined) {
      const err = new TokentapError('TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE', refused.message)
      controller.abort(err)
      this.#o.fail(err)
      return
    }
    res.flushHeaders()
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const res = this.#res
    if (res.destroyed) return
    if (!res.write(chunk)) {
      controller.pause()
      res.once('drain', () => controller.resume())
    }
  }

  onResponseEnd(): void {
    this.#done = true
    if (!this.#res.destroyed) this.#res.end()
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.#done = true
    if (err instanceof TokentapError) return
    if (this.#res.headersSent) this.#res.destroy()
    else this.#o.fail(upstreamFailure(err, false, this.#o.upstream))
  }
}
