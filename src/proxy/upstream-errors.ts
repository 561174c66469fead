import { TokentapError } from '../errors.ts'
import type { Config } from '../config/schema.ts'
import type { FailureCode } from '../errors.ts'

/**
 * The one place an upstream error becomes a failure code, and of two failures the one a request
 * keeps; the failure's `error_type` class is record/error-type.ts's table.
 */

/** undici's codes for an upstream that could not be reached at all. */
const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'ECONNRESET_BEFORE_HEADERS',
])

/** The library's code of an error (undici puts a socket's under `cause`), or ''. */
const libraryCodeOf = (err: Error): string => {
  const e = err as Error & { code?: string; cause?: { code?: string } }
  return e.code ?? e.cause?.code ?? ''
}

/** The limits an upstream error's message names (undefined: the proxy set none, as for @fastify/http-proxy). */
type UpstreamLimits = Pick<Config['upstream'], 'headers_timeout_ms' | 'idle_timeout_ms'> | undefined

/**
 * The failure an upstream error stands for, the library's code kept as its `detail`: before the
 * response head (`headed` false) it is the client's error answer, after it a cut stream.
 */
export function upstreamFailure(err: Error, headed: boolean, limits: UpstreamLimits): TokentapError {
  if (err instanceof TokentapError) return err
  const code = libraryCodeOf(err)
  let mapped: TokentapError
  if (headed) {
    mapped =
      code === 'UND_ERR_BODY_TIMEOUT'
        ? new TokentapError('TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', limits?.idle_timeout_ms ?? '')
        : new TokentapError('TOKENTAP_ERR_UPSTREAM_RESET', code || err.message)
    mapped.detail = code || err.message
    return mapped
  }
  if (code === 'UND_ERR_HEADERS_TIMEOUT')
    return new TokentapError('TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT', limits?.headers_timeout_ms ?? '')
  mapped = CONNECT_CODES.has(code)
    ? new TokentapError('TOKENTAP_ERR_UPSTREAM_CONNECT', code)
    : new TokentapError('TOKENTAP_ERR_UPSTREAM_FAILED', code || err.message)
  if (code !== '') mapped.detail = code
  return mapped
}

/** @fastify/reply-from answers 503 for a refused connection and 504 for a timeout. */
export function gatewayStatusFailure(statusCode: number | undefined): FailureCode {
  if (statusCode === 503) return 'TOKENTAP_ERR_UPSTREAM_CONNECT'
  if (statusCode === 504) return 'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT'
  return 'TOKENTAP_ERR_UPSTREAM_FAILED'
}

/**
 * The proxy's own decisions to end a request: they make the upstream and the client fail in
 * turn, so they are the cause and win over what the proxy only observed.
 */
const DECISIONS: ReadonlySet<FailureCode> = new Set<FailureCode>([
  'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT',
  'TOKENTAP_ERR_UPSTREAM_TIMEOUT',
  'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT',
  'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT',
  'TOKENTAP_ERR_BODY_TOO_LARGE',
  'TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE',
  'TOKENTAP_ERR_SHUTTING_DOWN',
  'TOKENTAP_ERR_APP_ANSWERED',
])

/** True when failure `next` replaces `current`: a decision over an observation, else the first reported. */
export function failurePrevails(next: FailureCode, current: FailureCode | undefined): boolean {
  if (current === undefined) return true
  return DECISIONS.has(next) && !DECISIONS.has(current)
}
