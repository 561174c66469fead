import type { Socket } from 'node:net'
import { Client, Pool, buildConnector, errors } from 'undici'
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
 * - A connection that comes up with nothing to send is closed at once (`handOver`).
 * Through a forward proxy, undici's ProxyAgent opens the tunnel itself; `tunnelPoolFactory`
 * gives its pools the same two changes around that.
 */

type Connector = ReturnType<typeof buildConnector>
type ConnectCallback = Parameters<Connector>[1]

/**
 * The client a connection is being handed to, set by the client's 'connect' listener: undici's
 * connect callback emits 'connect' and then starts the client's queued request, all within the
 * callback's call, so nothing else runs in between.
 */
let handedTo: Client | undefined

function watchedClient(origin: URL, options: object): Dispatcher {
  const client = new Client(origin, options)
  client.on('connect', () => {
    handedTo = client
  })
  return client
}

/** undici's Pool with clients whose new connections upstreamConnector can check (the Agents' `factory`). */
export function upstreamPool(origin: string | URL, options: Pool.Options): Dispatcher {
  return new Pool(origin, { ...options, factory: watchedClient })
}

/**
 * Hands a new connection to its client, and closes it when the client then has nothing to send.
 * That is the connection undici opens again for a request the proxy aborted before its response
 * head (the client left): it re-queues the aborted request, reconnects for it, then drops it
 * (nodejs/undici#5845), and its Agent keeps the idle connection pooled, with no keep-alive timer
 * to reap it, while any other connection to that origin is up. The client itself stays usable:
 * a later request connects anew.
 */
function handOver(callback: ConnectCallback, socket: Socket): void {
  handedTo = undefined
  callback(null, socket as never)
  const client = handedTo as Client | undefined
  handedTo = undefined
  if (client === undefined) return
  const { running, pending } = client.stats
  if (running === 0 && pending === 0) socket.destroy()
}

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
      if (args[0] !== null) return callback(...args)
      skipUnsolicitedContinue(args[1])
      handOver(callback, args[1] as Socket)
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
    if (direct.has(tunnel)) return upstreamPool(origin, options)
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
        if (args[0] !== null) return callback(...args)
        skipUnsolicitedContinue(args[1])
        handOver(callback, args[1] as Socket)
      })
    }) as Connector
    return upstreamPool(origin, { ...options, connect })
  }
}
