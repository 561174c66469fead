/**
 * The raw request target of a proxied request, taken apart: where the route's prefix ends in it
 * and what goes upstream after the prefix. Fastify's router decides which route a request
 * belongs to (on the percent-decoded path); the upstream gets the rest as the client wrote it.
 */

/** The methods a proxy route takes. */
export const PROXY_METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'] as const

/**
 * Where `base` ends in a raw request target whose path matched it once percent-decoded (as
 * Fastify's router matches): `/u%70/v1` ends the base `/up` at 5. The rest goes upstream as the
 * client wrote it. Falls back to `base.length` should the raw path not spell the base.
 */
export function rawPrefixEnd(url: string, base: string): number {
  let i = 0
  for (let k = 0; k < base.length; k++) {
    const want = base.charCodeAt(k)
    if (url.charCodeAt(i) === want) i++
    else if (url.charCodeAt(i) === 37 /* % */ && Number.parseInt(url.slice(i + 1, i + 3), 16) === want) i += 3
    else return base.length
  }
  return i
}

export interface UpstreamTarget {
  /** Path and query to request upstream (prefix stripped, always starting with `/`). */
  readonly pathAndQuery: string
  /** The path alone (what provider detection and the log line see). */
  readonly path: string
}

/** The target after the prefix, which ends at `restAt` in the raw `url`. */
export function upstreamPathAndQuery(url: string, restAt: number): UpstreamTarget {
  const rest = url.slice(restAt)
  const pathAndQuery = rest.length === 0 || rest[0] === '?' ? `/${rest}` : rest
  const q = pathAndQuery.indexOf('?')
  return { pathAndQuery, path: q < 0 ? pathAndQuery : pathAndQuery.slice(0, q) }
}

/**
 * Whether a path (after the route prefix) climbs above its own root once its dot-segments are
 * resolved (RFC 3986 §5.2.4): `/..`, `/a/../..`, `/%2e%2e/x`, `/.%2E/x`, `/..%2fx`. The
 * percent-encoded forms count, and so do `%2f` and backslashes as separators, because servers
 * behind the proxy may decode them; such a path would leave the route's base path upstream.
 */
export function escapesRoot(path: string): boolean {
  // Fast path: no dot that could start a dot-segment, in any spelling.
  if (path.indexOf('.') < 0 && !/%2e/i.test(path)) return false
  const decoded = path.replace(/%2e/gi, '.').replace(/%2f|%5c|\\/gi, '/')
  let depth = 0
  for (const segment of decoded.split('/').slice(1)) {
    if (segment === '..') {
      if (depth === 0) return true
      depth--
    } else if (segment !== '.') {
      depth++
    }
  }
  return false
}
