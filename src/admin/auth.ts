import { timingSafeEqual } from 'node:crypto'
import type { FastifyInstance } from 'fastify'

/**
 * `admin.token`: every admin route but the health checks wants `Authorization: Bearer <token>`.
 * One hook for the whole listener, so a route added later is protected without asking.
 */

/** Paths a probe must reach without a token (the kubelet has none). */
const OPEN_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz'])

/** Compares in constant time, so the answer's timing does not give the token away byte by byte. */
function tokenMatches(header: string | undefined, token: string): boolean {
  if (header === undefined || !header.startsWith('Bearer ')) return false
  const given = Buffer.from(header.slice(7))
  const want = Buffer.from(token)
  return given.length === want.length && timingSafeEqual(given, want)
}

/**
 * Answers 401 to requests without the token, except for the health checks and the routes
 * (by their route URL) that check it themselves.
 */
export function requireToken(admin: FastifyInstance, token: string, selfAuthenticated: ReadonlySet<string> = new Set()): void {
  admin.addHook('onRequest', async (request, reply) => {
    const path = request.url.split('?')[0]
    if (OPEN_PATHS.has(path) || tokenMatches(request.headers.authorization, token)) return
    if (request.routeOptions.url !== undefined && selfAuthenticated.has(request.routeOptions.url)) return
    // The path comes from the route table, never the request: the answer echoes nothing the client sent.
    const route = request.routeOptions.url ?? 'this endpoint'
    return reply
      .code(401)
      .header('www-authenticate', 'Bearer')
      .send({ error: `a bearer token is required for ${route}` })
  })
}
