import { TokentapError } from '../errors.ts'

/**
 * The request target as a route forwards it: origin-form, path and query only (RFC 9112 §3.2.1).
 *
 * A server must accept the absolute-form (`GET http://host/path`, RFC 9112 §3.2.2) and take only
 * its path and query: the authority is the client's text and must never reach the upstream's
 * path. A fragment is never part of a request target (RFC 9110 §4.2.4: clients do not send it);
 * should one come, it is cut off rather than forwarded. Anything else (asterisk-form `*`,
 * authority-form `host:port`, other schemes, an empty authority) is answered 400.
 */

/** Absolute-form: `http://` or `https://` (any case), then the authority up to the path, query or fragment. */
const ABSOLUTE = /^https?:\/\/([^/?#]*)/i

/** The origin-form path and query of a raw `req.url`, or the 400 the client gets. */
export function originForm(target: string | undefined): string | TokentapError {
  if (target === undefined || target.length === 0) return badTarget('empty')
  if (target.charCodeAt(0) === 47 /* / */) {
    const hash = target.indexOf('#')
    return hash < 0 ? target : target.slice(0, hash)
  }
  const m = ABSOLUTE.exec(target)
  if (m === null) return badTarget(target === '*' ? 'asterisk-form' : 'not origin-form or absolute-form')
  // userinfo is deprecated in http(s) URIs and a classic way to disguise a host (RFC 9110 §4.2.4).
  if (m[1].length === 0 || m[1].includes('@')) return badTarget('bad authority in absolute-form')
  let rest = target.slice(m[0].length)
  const hash = rest.indexOf('#')
  if (hash >= 0) rest = rest.slice(0, hash)
  // `http://host` and `http://host?q` mean the path `/` (RFC 9110 §4.2.3).
  return rest.length === 0 || rest.charCodeAt(0) === 63 /* ? */ ? `/${rest}` : rest
}

// The client's text stays out of the message: error bodies end up in SDK exception messages and logs.
function badTarget(why: string): TokentapError {
  return new TokentapError('TOKENTAP_ERR_BAD_TARGET', why)
}
