import { createHmac, timingSafeEqual } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import type { FastifyInstance } from 'fastify'

/**
 * `admin.token`'s one checker: a hook over the whole listener, so a route added later is protected.
 * A browser cannot put a bearer token on its navigation or an EventSource, so `GET /?token=…` sets
 * an HttpOnly cookie holding an HMAC of the token (not replayable as a bearer token) and redirects.
 */

/** Paths reached without a token: the probes (the kubelet has none) and the icon a browser asks for beside the page. */
const OPEN_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/favicon.ico'])
const COOKIE = 'tokentap_admin'

/** Compares in constant time, so the answer's timing does not give the token away byte by byte. */
const same = (a: string, b: string): boolean => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

const bearer = (header: string | undefined, token: string): boolean =>
  header?.startsWith('Bearer ') === true && same(header.slice(7), token)

const cookieValue = (token: string): string =>
  createHmac('sha256', token).update('tokentap live page').digest('base64url')

/** The Set-Cookie header for a browser that showed the token. */
export function setCookie(token: string): string {
  return `${COOKIE}=${cookieValue(token)}; HttpOnly; SameSite=Strict; Path=/`
}

function cookieOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq > 0 && part.slice(0, eq).trim() === COOKIE) return part.slice(eq + 1).trim()
  }
  return undefined
}

/** Whether a request may see the live views: no token configured, a bearer token, or the cookie. */
export function allowed(headers: IncomingHttpHeaders, token: string | undefined): boolean {
  if (token === undefined || bearer(headers.authorization, token)) return true
  const cookie = cookieOf(headers.cookie)
  return cookie !== undefined && same(cookie, cookieValue(token))
}

export function tokenGiven(given: unknown, token: string): boolean {
  return typeof given === 'string' && same(given, token)
}

/** Answers 401 without the token, except for the health checks and the routes that check it themselves. */
export function requireToken(
  admin: FastifyInstance,
  token: string,
  selfAuthenticated: ReadonlySet<string> = new Set(),
): void {
  admin.addHook('onRequest', async (request, reply) => {
    const path = request.url.split('?')[0]
    if (OPEN_PATHS.has(path) || bearer(request.headers.authorization, token)) return
    if (request.routeOptions.url !== undefined && selfAuthenticated.has(request.routeOptions.url)) return
    // The path comes from the route table, never the request: the answer echoes nothing the client sent.
    const route = request.routeOptions.url ?? 'this endpoint'
    return reply
      .code(401)
      .header('www-authenticate', 'Bearer')
      .send({ error: `a bearer token is required for ${route}` })
  })
}
