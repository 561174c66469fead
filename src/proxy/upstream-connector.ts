import type { Socket } from 'node:net'
import { Pool, buildConnector, errors } from 'undici'
import type { Dispatcher } from 'undici'
import { skipUnsolicitedContinue } from './unsolicited-continue.ts'

/**
 * How tokentap's undici agents open upstream connections: undici's own connector (TCP, TLS with
 * the route's settings), with two changes.
 * - The connect timeout runs on a plain timer of the proxy's own. undici's runs on its fast
 *   timers (setFastTimeout in lib/util/timers.js), checked on a tick every 499 ms, so it fires up
 *   to about a second late (a 300 ms setting fired at 1,026 ms); this one fires when set. It covers the TCP
 *   connect and, for https, the TLS handshake, as undici's does, and fails with undici's
 *   `UND_ERR_CONNECT_TIMEOUT` error (mapped to TOKENTAP_ERR_UPSTREAM_CONNECT).
 * - Each connection skips an unsolicited `100 Continue` (unsolicited-continue.ts).
 * Through a forward proxy, undici's ProxyAgent opens the tunnel itself; `tunnelPoolFactory`
 * gives its pools the same two changes around that.
 */

type Connector = ReturnType<typeof buildConnector>

/** upstreamConnector's connectors: a pool that already connects through one needs no tunnel wrapper. */
const direct = new WeakSet<Connector>()

const timeoutError = (host: string, port: string, protocol: string, timeout: number): Error =>
  new errors.ConnectTimeoutError(`Connect Timeout Error (attempted address: ${host}:${port === '' ? (protocol === 'https:' ? 443 : 80) : port}, timeout: ${timeout}ms)`)

export function upstreamConnector(options: buildConnector.BuildOptions & { readonly timeout: number }): Connector {
  const { timeout, ...rest } = options
  // timeout 0: undici sets no timer of its own.
  const connect = buildConnector({ ...rest, timeout: 0 })
  const connector = ((opts, callback) => {
    let timer: NodeJS.Timeout | undefined
    const socket = connect(opts, (...args) => {
      clearTimeout(timer)
      if (args[0] === null) skipUnsolicitedContinue(args[1])
      callback(...args)
    }) as Socket | undefined
    if (socket !== undefined && timeout > 0) {
      timer = setTimeout(() => socket.destroy(timeoutError(opts.hostname, opts.port, opts.protocol, timeout)), timeout)
      timer.unref()
    }
    return socket
  }) as Connector
  direct.add(connector)
  return connector
}

/**
 * The `factory` of a ProxyAgent: its pools open connections through the ProxyAgent's own tunnel
 * connect (proxy connection, CONNECT, TLS inside), with the connect timer of upstreamConnector
 * over all of it (the tunnel's socket, should it come later, is closed) and the 100 skip on the
 * tunnelled socket.
 */
export function tunnelPoolFactory(timeout: number): (origin: string | URL, options: Pool.Options) => Dispatcher {
  return (origin, options) => {
    const tunnel = options.connect as Connector
    // EnvHttpProxyAgent hands the same factory to its agent for NO_PROXY hosts: those connect directly.
    if (direct.has(tunnel)) return new Pool(origin, options)
    const connect = ((opts, callback) => {
      let settled = false
      const timer =
        timeout > 0
          ? setTimeout(() => {
              settled = true
              callback(timeoutError(opts.hostname, opts.port, opts.protocol, timeout), null)
            }, timeout)
          : undefined
      timer?.unref()
      tunnel(opts, (...args) => {
        clearTimeout(timer)
        if (settled) {
          args[1]?.destroy()
          return
        }
        settled = true
        if (args[0] === null) skipUnsolicitedContinue(args[1])
        callback(...args)
      })
    }) as Connector
    return new Pool(origin, { ...options, connect })
  }
}
