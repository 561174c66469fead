import type { Server } from 'node:http'
import { Server as HttpsServer } from 'node:https'
import type { Socket } from 'node:net'

/**
 * Settings of the proxy's own HTTP listener that keep it transparent.
 *
 * Node's server keeps only about the first 1,000 request header lines by default
 * (`maxHeadersCount`) and drops the rest without a word, so a request with 1,500 headers went
 * upstream cut short. With no count limit every header is forwarded; the total size stays bounded
 * by Node's `maxHeaderSize` (16 KiB by default, `--max-http-header-size`), beyond which the client
 * gets 431 before any byte goes upstream.
 */
export function configureListener(server: Server, timeouts: ListenerTimeouts): void {
  server.maxHeadersCount = 0
  // Node times a request head only once its first byte came, and a connection that sends nothing
  // is no request at all: each would hold a socket for free. The head timer covers both.
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

/** Connections that have sent a whole request head (the rest are timed by the head timer). */
const started = new WeakSet<Socket>()

export interface ListenerTimeouts {
  /** server.request_head_timeout_ms */
  readonly requestHeadMs: number
  /** server.keep_alive_timeout_ms */
  readonly keepAliveMs: number
}
