import { readFileSync } from 'node:fs'
import type { ListenerTls } from './config/schema.ts'
import { TokentapError } from './errors.ts'

/** TLS on tokentap's own listeners (`server.tls`, `admin.tls`) for sidecar set-ups; the PEM files are read once at start-up. */

/** `{ cert, key }` read from a listener's `tls:` files (`key`: the config key, for the error), or undefined without TLS. */
export function listenerTlsOptions(
  tls: ListenerTls | undefined,
  key: string,
): { cert: Buffer; key: Buffer } | undefined {
  if (tls === undefined) return undefined
  const read = (name: 'cert' | 'key'): Buffer => {
    try {
      return readFileSync(tls[name])
    } catch (err) {
      throw new TokentapError(
        'TOKENTAP_ERR_CONFIG_INVALID',
        `'${key}.${name}' cannot be read: ${(err as Error).message}`,
      )
    }
  }
  return { cert: read('cert'), key: read('key') }
}
