import type { Socket } from 'node:net'
import { buildConnector, errors } from 'undici'
import { skipUnsolicitedContinue } from './unsolicited-continue.ts'

/**
 * How tokentap's undici agents open upstream connections: undici's own connector (TCP, TLS with
 * the route's settings), with two changes.
 * - The connect timeout runs on a plain timer of the proxy's own. undici's runs on its coarse
 *   timers (lib/util/timers.js: past 1 s a timeout is checked every 500 ms), so
 *   `connect_timeout_ms: 2000` could fire at 2.9 s; this one fires when set. It covers the TCP
 *   connect and, for https, the TLS handshake, as undici's does, and fails with undici's
 *   `UND_ERR_CONNECT_TIMEOUT` error (mapped to TOKENTAP_ERR_UPSTREAM_CONNECT).
 * - Each connection skips an unsolicited `100 Continue` (unsolicited-continue.ts).
 */

type Connector = ReturnType<typeof buildConnector>

export function upstreamConnector(options: buildConnector.BuildOptions & { readonly timeout: number }): Connector {
  const { timeout, ...rest } = options
  // timeout 0: undici sets no timer of its own.
  const connect = buildConnector({ ...rest, timeout: 0 })
  return ((opts, callback) => {
    let timer: NodeJS.Timeout | undefined
    const socket = connect(opts, (...args) => {
      clearTimeout(timer)
      if (args[0] === null) skipUnsolicitedContinue(args[1])
      callback(...args)
    }) as Socket | undefined
    if (socket !== undefined && timeout > 0) {
      timer = setTimeout(() => {
        const where = `${opts.hostname}:${opts.port === '' ? (opts.protocol === 'https:' ? 443 : 80) : opts.port}`
        socket.destroy(new errors.ConnectTimeoutError(`Connect Timeout Error (attempted address: ${where}, timeout: ${timeout}ms)`))
      }, timeout)
      timer.unref()
    }
    return socket
  }) as Connector
}
