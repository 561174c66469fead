import { ServerResponse } from 'node:http'
import type { IncomingMessage, Server } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { Server as TlsServer } from 'node:tls'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'

/**
 * How a WebSocket upgrade reaches tokentap's routes. Node hands a request carrying
 * `Connection: upgrade` to the server's 'upgrade' listeners, with the raw socket, and no longer
 * parses that connection. This listener sends a WebSocket upgrade (GET, `Upgrade: websocket`)
 * through Fastify's router, as @fastify/websocket does (index.js, onUpgrade): the caller's hooks
 * (API keys, rate limits) run as for any request, and the route's handler finds the socket with
 * `pendingUpgrade(request.raw)`. Anything answered over HTTP instead (a hook's 401, a 404, a
 * refused upgrade) is written on that socket by a ServerResponse, and the connection then ends.
 *
 * Any other upgrade (`Upgrade: h2c` from `curl --http2`, an upgrade on a POST) is handed back to
 * Node's HTTP parser without its `Upgrade` offer, so it is served as a plain HTTP/1.1 request on
 * the same connection, as before there was an upgrade listener: the proxy never offered h2c.
 */

const UPGRADE = Symbol('tokentap.upgrade')

/** A WebSocket upgrade request waiting for its route's handler. */
export interface PendingUpgrade {
  /** The client's connection, no longer parsed by Node. */
  readonly socket: Duplex
  /** Bytes the client sent after the request head (frames sent without waiting for the 101). */
  readonly head: Buffer
  /** Answers over HTTP on the socket (the connection ends after it). */
  readonly res: ServerResponse
  /** Set by the handler that takes the socket over (then no HTTP answer ends it). */
  taken: boolean
}

type UpgradeRequest = IncomingMessage & { [UPGRADE]?: PendingUpgrade }

/** The pending upgrade of a request that came through the upgrade listener, else undefined. */
export function pendingUpgrade(req: IncomingMessage): PendingUpgrade | undefined {
  return (req as UpgradeRequest)[UPGRADE]
}

/** A request that asks for a WebSocket: GET with `websocket` among its Upgrade tokens (RFC 6455 §4.1). */
function isWebSocketUpgrade(req: IncomingMessage): boolean {
  if (req.method !== 'GET') return false
  const upgrade = req.headers.upgrade
  return typeof upgrade === 'string' && upgrade.split(',').some((t) => t.trim().toLowerCase() === 'websocket')
}

/**
 * Hands an upgrade request back to Node's HTTP parser as a plain request: its head is written
 * again without Upgrade (and the names its Connection header lists for it), in front of the
 * bytes that followed, and the socket starts over as a new connection of the server.
 */
function asPlainRequest(server: Server, req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const raw = req.rawHeaders
  let connection: string[] = []
  for (let i = 0; i < raw.length; i += 2) if (raw[i].toLowerCase() === 'connection') connection = connection.concat(raw[i + 1].split(',').map((t) => t.trim().toLowerCase()))
  const dropped = new Set(['upgrade', ...connection.filter((t) => t !== 'keep-alive' && t !== 'close')])
  let text = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n`
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase()
    if (dropped.has(name)) continue
    if (name === 'connection') {
      const kept = raw[i + 1]
        .split(',')
        .map((t) => t.trim())
        .filter((t) => !dropped.has(t.toLowerCase()))
      if (kept.length > 0) text += `${raw[i]}: ${kept.join(', ')}\r\n`
      continue
    }
    text += `${raw[i]}: ${raw[i + 1]}\r\n`
  }
  socket.unshift(Buffer.concat([Buffer.from(`${text}\r\n`, 'latin1'), head]))
  // An https server parses HTTP on its 'secureConnection' sockets, a plain one on 'connection'.
  server.emit(server instanceof TlsServer ? 'secureConnection' : 'connection', socket)
}

/**
 * Node 24.9 and later ask `server.shouldUpgradeCallback(req)` before an 'upgrade' event, and read
 * an upgrade request's body into the request rather than into `head`, so the hand-back of
 * asPlainRequest would lose it. There, an upgrade that is not a WebSocket is declined up front and
 * Node serves it as a plain request itself, unless another 'upgrade' listener is installed.
 * https://nodejs.org/api/http.html#httpcreateserveroptions-requestlistener (shouldUpgradeCallback)
 */
function declineOtherUpgrades(server: Server, ours: (...args: never[]) => void): void {
  const asked = server as Server & { shouldUpgradeCallback?: (this: Server, req: IncomingMessage) => boolean }
  const previous = asked.shouldUpgradeCallback
  if (typeof previous !== 'function') return
  asked.shouldUpgradeCallback = function (this: Server, req: IncomingMessage): boolean {
    if (!isWebSocketUpgrade(req) && this.listeners('upgrade').every((l) => l === ours)) return false
    return previous.call(this, req)
  }
}

/**
 * Installs the upgrade listener on the instance's server. Another 'upgrade' listener on the same
 * server (@fastify/websocket, a `ws` server) would take every upgrade a second time: should one
 * be there once the instance is ready, tokentap leaves upgrades to it and says so in the log.
 */
export function installUpgradeListener(app: FastifyInstance, logger: Logger): void {
  const server = app.server
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    // Node took its own error listener off the socket: a reset must not become an uncaught error.
    socket.on('error', () => socket.destroy())
    if (!isWebSocketUpgrade(req)) {
      asPlainRequest(server, req, socket, head)
      return
    }
    // A session may stay quiet for long: its idle limit is the proxy's own (relay.ts), not the listener's.
    ;(socket as Partial<Socket>).setTimeout?.(0)
    const res = new ServerResponse(req)
    res.shouldKeepAlive = false
    const pending: PendingUpgrade = { socket, head, res, taken: false }
    ;(req as UpgradeRequest)[UPGRADE] = pending
    res.assignSocket(socket as never)
    // An HTTP answer ends the connection: nothing would parse a next request on it.
    res.on('finish', () => {
      if (!pending.taken) socket.end()
    })
    try {
      app.routing(req, res)
    } catch (err) {
      logger.warn({ err }, 'a WebSocket upgrade could not be routed')
      socket.destroy()
    }
  }
  server.on('upgrade', onUpgrade)
  declineOtherUpgrades(server, onUpgrade)
  app.addHook('onReady', async () => {
    if (server.listenerCount('upgrade') > 1) {
      server.off('upgrade', onUpgrade)
      logger.warn('another upgrade listener is installed on this server (@fastify/websocket?): tokentap leaves WebSocket upgrades to it, and its routes pass no realtime sessions')
    }
  })
  app.addHook('onClose', async () => {
    server.off('upgrade', onUpgrade)
  })
}
