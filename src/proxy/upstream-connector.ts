import type { Socket } from 'node:net'
import { Client, Pool, buildConnector, errors } from 'undici'
import type { Dispatcher } from 'undici'
import { skipUnsolicitedContinue } from './unsolicited-continue.ts'

/**
 * undici's connector with three changes: a connect timeout on a plain timer (undici's fast timers
 * tick every 499 ms and fire up to a second late; lib/util/timers.js), failing as
 * `UND_ERR_CONNECT_TIMEOUT`; an unsolicited `100 Continue` skipped (unsolicited-continue.ts); and
 * a connection that comes up with nothing to send closed at once (`handOver`).
 */

type Connector = ReturnType<typeof buildConnector>
type ConnectCallback = Parameters<Connector>[1]

/** Set by the client's 'connect' listener, which undici calls synchronously inside its connect callback. */
let handedTo: Client | undefined

function watchedClient(origin: URL, options: object): Dispatcher {
  const client = new Client(origin, options)
  client.on('connect', () => {
    handedTo = client
  })
  return client
}

export function upstreamPool(origin: string | URL, options: Pool.Options): Dispatcher {
  return new Pool(origin, { ...options, factory: watchedClient })
}

/**
 * Closes a new connection whose client has nothing to send: undici reconnects for a request the
 * proxy aborted before its head and pools that idle socket with no timer to reap it (nodejs/undici#5845).
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
  new errors.ConnectTimeoutError(
    `Connect Timeout Error (attempted address: ${host}:${port === '' ? (protocol === 'https:' ? 443 : 80) : port}, timeout: ${timeout}ms)`,
  )

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
 * A ProxyAgent's pool `factory`: its tunnel connect (proxy, CONNECT, TLS) under upstreamConnector's
 * timer, with the 100 skip on the tunnelled socket.
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
