import { ServerResponse } from 'node:http'
import type { IncomingMessage, Server } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { Server as TlsServer } from 'node:tls'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'

/**
 * Routes WebSocket upgrades through Fastify's router, as @fastify/websocket does (index.js,
 * onUpgrade), so the caller's hooks run as for any request; the handler takes the socket with
 * `pendingUpgrade(request.raw)`. Any other upgrade (`h2c` from `curl --http2`) goes back to Node's
 * parser without its offer: the proxy never offered h2c.
 */

const UPGRADE = Symbol('tokentap.upgrade')

export interface PendingUpgrade {
  readonly socket: Duplex
  /** Frames the client sent without waiting for the 101. */
  readonly head: Buffer
  /** The connection ends after it. */
  readonly res: ServerResponse
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

/** Re-feeds an upgrade request's head, without its Upgrade, to Node's parser as a new connection. */
function asPlainRequest(server: Server, req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const raw = req.rawHeaders
  let connection: string[] = []
  for (let i = 0; i < raw.length; i += 2)
    if (raw[i].toLowerCase() === 'connection')
      connection = connection.concat(raw[i + 1].split(',').map((t) => t.trim().toLowerCase()))
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
 * Node 24.9+ reads a declined upgrade's body into the request, which asPlainRequest would lose, so
 * non-WebSocket upgrades are declined up front there.
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

/** Leaves upgrades to another 'upgrade' listener (@fastify/websocket, `ws`) when one is installed, or each would be taken twice. */
export function installUpgradeListener(app: FastifyInstance, logger: Logger): void {
  const server = app.server
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    // Node took its own error listener off the socket: a reset must not become an uncaught error.
    socket.on('error', () => socket.destroy())
    if (!isWebSocketUpgrade(req)) {
      asPlainRequest(server, req, socket, head)
      return
    }
    // Its idle limit is the proxy's own (relay.ts).
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
      logger.warn(
        'another upgrade listener is installed on this server (@fastify/websocket?): tokentap leaves WebSocket upgrades to it, and its routes pass no realtime sessions',
      )
    }
  })
  app.addHook('onClose', async () => {
    server.off('upgrade', onUpgrade)
  })
}
