import { TokentapError } from '../errors.ts'

/**
 * The origin-form target (RFC 9112 §3.2.1) a route forwards: the absolute-form's authority is
 * dropped (§3.2.2), a fragment cut off (RFC 9110 §4.2.4), any other form answered 400.
 */

const ABSOLUTE = /^https?:\/\/([^/?#]*)/i

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

// Error bodies end up in SDK exception messages and logs, so the client's text stays out.
function badTarget(why: string): TokentapError {
  return new TokentapError('TOKENTAP_ERR_BAD_TARGET', why)
}
