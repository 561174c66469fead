import type { IncomingMessage, ServerResponse } from 'node:http'

/**
 * Which proxy route a request belongs to, decided on the raw request before Fastify sees it, so
 * proxied requests skip Fastify's router, request/reply objects and hooks. The answer must be
 * the one Fastify's own routes for the same prefixes (`base` and `base/*`, registered in app.ts)
 * would give; when unsure it is `undefined` and Fastify decides.
 */

/** The methods a proxy route takes (Fastify's routes are registered with the same list). */
export const PROXY_METHODS = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'] as const
type ProxyMethod = (typeof PROXY_METHODS)[number]

/** A proxy route as the request listener sees it: `base` is its prefix without a trailing slash ('' for '/'). */
export interface ProxyRoute {
  readonly base: string
  readonly handle: (req: IncomingMessage, res: ServerResponse, tReq: number, restAt?: number) => void
}

/**
 * The route a request's URL falls under, matched as Fastify's `base` and `base/*` routes would
 * be (longest prefix first), or undefined to leave the request to Fastify: unknown methods,
 * percent-encoded or absolute-form targets, and paths no route owns.
 */
export function matchRoute(routes: readonly ProxyRoute[], method: string | undefined, url: string | undefined): ProxyRoute | undefined {
  if (url === undefined || method === undefined || !PROXY_METHODS.includes(method as ProxyMethod)) return undefined
  for (const r of routes) {
    const n = r.base.length
    if (n === 0) return url.charCodeAt(0) === 47 /* / */ ? r : undefined
    if (!url.startsWith(r.base)) continue
    const next = url.charCodeAt(n)
    if (Number.isNaN(next) || next === 47 /* / */ || next === 63 /* ? */) return r
  }
  return undefined
}

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
