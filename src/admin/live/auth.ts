import { createHmac, timingSafeEqual } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/**
 * `admin.token` for a browser: a page cannot add an Authorization header to its own navigation
 * or to an EventSource, so `GET /?token=…` checks the token once, sets an HttpOnly cookie and
 * redirects to `/` (the token leaves the address bar and the history). The cookie holds an HMAC
 * of the token, not the token, so it cannot be replayed as a bearer token on /metrics. A
 * `Authorization: Bearer` header works everywhere too (curl, scripts).
 */

const COOKIE = 'tokentap_admin'

const same = (a: string, b: string): boolean => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

/** The cookie's value for a token. */
function cookieValue(token: string): string {
  return createHmac('sha256', token).update('tokentap live page').digest('base64url')
}

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
  if (token === undefined) return true
  const auth = headers.authorization
  if (auth?.startsWith('Bearer ') && same(auth.slice(7), token)) return true
  const cookie = cookieOf(headers.cookie)
  return cookie !== undefined && same(cookie, cookieValue(token))
}

/** Whether `?token=` matches. */
export function tokenGiven(given: unknown, token: string): boolean {
  return typeof given === 'string' && same(given, token)
}
