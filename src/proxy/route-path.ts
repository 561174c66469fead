/** Fastify routes on the percent-decoded path; the upstream gets the rest as the client wrote it. */

export const PROXY_METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'] as const

/** `/u%70/v1` ends the base `/up` at 5; `base.length` when the raw path does not spell the base. */
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
  /** Prefix stripped, always starting with `/`. */
  readonly pathAndQuery: string
  readonly path: string
}

export function upstreamPathAndQuery(url: string, restAt: number): UpstreamTarget {
  const rest = url.slice(restAt)
  const pathAndQuery = rest.length === 0 || rest[0] === '?' ? `/${rest}` : rest
  const q = pathAndQuery.indexOf('?')
  return { pathAndQuery, path: q < 0 ? pathAndQuery : pathAndQuery.slice(0, q) }
}

/**
 * Whether resolving dot-segments (RFC 3986 §5.2.4) climbs above the root: `%2e`, `%2f` and
 * backslashes count, because servers behind the proxy may decode them.
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
