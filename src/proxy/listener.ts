import type { Server } from 'node:http'
import { Server as HttpsServer } from 'node:https'
import type { Socket } from 'node:net'

/**
 * Settings that keep the listener transparent: Node silently drops request header lines past
 * `maxHeadersCount` (~1,000), so there is no count limit; `maxHeaderSize` still bounds the size (431).
 */
export function configureListener(server: Server, timeouts: ListenerTimeouts): void {
  server.maxHeadersCount = 0
  // Node times a head only from its first byte, so an idle connection would hold a socket for free.
  server.headersTimeout = timeouts.requestHeadMs
  server.keepAliveTimeout = timeouts.keepAliveMs
  // Over TLS the request's socket is the TLS one (its handshake has Node's own timeout).
  server.on(server instanceof HttpsServer ? 'secureConnection' : 'connection', (socket: Socket) => {
    const timer = setTimeout(() => {
      if (!started.has(socket)) socket.destroy()
    }, timeouts.requestHeadMs)
    timer.unref()
    socket.once('close', () => clearTimeout(timer))
  })
  server.prependListener('request', (req) => {
    started.add(req.socket)
  })
}

const started = new WeakSet<Socket>()

export interface ListenerTimeouts {
  /** server.request_head_timeout_ms */
  readonly requestHeadMs: number
  /** server.keep_alive_timeout_ms */
  readonly keepAliveMs: number
}
