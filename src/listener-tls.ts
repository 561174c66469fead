import { readFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import type { RequestListener, Server } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { ListenerTls } from './config/schema.ts'
import { TokentapError } from './errors.ts'

/**
 * TLS on tokentap's own listeners (`server.tls`, `admin.tls`), for sidecar set-ups where the
 * application or the scraper speaks HTTPS to it. The PEM files are read once, at start-up.
 */

/** `{ cert, key }` read from a listener's `tls:` files (`key`: the config key, for the error), or undefined without TLS. */
export function listenerTlsOptions(tls: ListenerTls | undefined, key: string): { cert: Buffer; key: Buffer } | undefined {
  if (tls === undefined) return undefined
  const read = (name: 'cert' | 'key'): Buffer => {
    try {
      return readFileSync(tls[name])
    } catch (err) {
      throw new TokentapError('TOKENTAP_ERR_CONFIG_INVALID', `'${key}.${name}' cannot be read: ${(err as Error).message}`)
    }
  }
  return { cert: read('cert'), key: read('key') }
}

/** An HTTP server, or an HTTPS one with the listener's certificate (an https.Server is an http.Server to its callers). */
export function createListener(tls: ListenerTls | undefined, key: string, listener: RequestListener): Server {
  const options = listenerTlsOptions(tls, key)
  return options === undefined ? createHttpServer(listener) : (createHttpsServer(options, listener) as unknown as Server)
}
