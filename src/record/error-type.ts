import type { FailureCode } from '../errors.ts'
import { isSuccess } from '../http-status.ts'

/**
 * The one place a failed request gets its `error_type` class (from its failure code, the
 * upstream's status or the error the provider named); adding a class changes the public contract
 * (CONTRACT.md "Fault domain", listed for users in docs/metrics.md).
 */

export const ErrorType = {
  none: 'none',
  upstreamRateLimited: 'upstream_rate_limited',
  upstreamOverloaded: 'upstream_overloaded',
  upstreamError: 'upstream_error',
  upstreamTimeout: 'upstream_timeout',
  upstreamUnreachable: 'upstream_unreachable',
  upstreamReset: 'upstream_reset',
  streamError: 'stream_error',
  clientRejected: 'client_rejected',
  clientCancelled: 'client_cancelled',
  clientTimeout: 'client_timeout',
  policy: 'policy',
  proxyError: 'proxy_error',
  workerExited: 'worker_exited',
} as const
export type ErrorType = (typeof ErrorType)[keyof typeof ErrorType]

/** @internal Every class, in the contract's order (tests hold it to the contract). */
export const ERROR_TYPES: readonly ErrorType[] = Object.values(ErrorType)

/**
 * Keyed by the code's string so a code another module adds (`TOKENTAP_ERR_WORKER_EXITED`) is
 * classed here too; the `satisfies` makes an unclassed FailureCode a type error.
 */
const BY_FAILURE = {
  TOKENTAP_ERR_UPSTREAM_CONNECT: ErrorType.upstreamUnreachable,
  TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT: ErrorType.upstreamTimeout,
  TOKENTAP_ERR_UPSTREAM_TIMEOUT: ErrorType.upstreamTimeout,
  TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT: ErrorType.upstreamTimeout,
  TOKENTAP_ERR_UPSTREAM_FAILED: ErrorType.upstreamUnreachable,
  TOKENTAP_ERR_UPSTREAM_RESET: ErrorType.upstreamReset,
  TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE: ErrorType.upstreamError,
  // The caller broke a limit or a rule of HTTP: its own mistake, as a provider's 4xx is.
  TOKENTAP_ERR_BODY_TOO_LARGE: ErrorType.clientRejected,
  TOKENTAP_ERR_BAD_REQUEST: ErrorType.clientRejected,
  TOKENTAP_ERR_BAD_TARGET: ErrorType.clientRejected,
  TOKENTAP_ERR_TOO_MANY_HEADERS: ErrorType.clientRejected,
  TOKENTAP_ERR_NOT_FOUND: ErrorType.clientRejected,
  TOKENTAP_ERR_CLIENT_BODY_TIMEOUT: ErrorType.clientTimeout,
  TOKENTAP_ERR_CLIENT_GONE: ErrorType.clientCancelled,
  TOKENTAP_ERR_APP_ANSWERED: ErrorType.policy,
  TOKENTAP_ERR_SHUTTING_DOWN: ErrorType.proxyError,
  TOKENTAP_ERR_INTERNAL: ErrorType.proxyError,
  TOKENTAP_ERR_WORKER: ErrorType.proxyError,
  TOKENTAP_ERR_WORKER_EXITED: ErrorType.workerExited,
  // Never a request's failure (start-up and configuration); classed so the table is total.
  TOKENTAP_ERR_CONFIG_READ: ErrorType.proxyError,
  TOKENTAP_ERR_CONFIG_YAML: ErrorType.proxyError,
  TOKENTAP_ERR_CONFIG_INVALID: ErrorType.proxyError,
  TOKENTAP_ERR_ENV_INVALID: ErrorType.proxyError,
  TOKENTAP_ERR_PLUGIN_MISSING: ErrorType.proxyError,
  TOKENTAP_ERR_LISTEN: ErrorType.proxyError,
} as const satisfies Record<FailureCode | 'TOKENTAP_ERR_WORKER_EXITED', ErrorType>

/** Under TOKENTAP_ERR_UPSTREAM_CONNECT, a timeout rather than a refusal. */
const CONNECT_TIMEOUT_DETAILS = new Set(['UND_ERR_CONNECT_TIMEOUT'])

/** The class of a failure code (`detail`: undici's code under it, when known). */
export function errorTypeOfFailure(code: string, detail?: string): ErrorType {
  if (code === 'TOKENTAP_ERR_UPSTREAM_CONNECT' && detail !== undefined && CONNECT_TIMEOUT_DETAILS.has(detail))
    return ErrorType.upstreamTimeout
  return (BY_FAILURE as Record<string, ErrorType>)[code] ?? ErrorType.proxyError
}

/**
 * The class of an upstream's HTTP status, undefined for 2xx: 529 is Anthropic's overloaded, 524 a
 * gateway's timeout in front of the model; 1xx and 3xx are no answer, so an upstream error.
 */
export function errorTypeOfStatus(status: number): ErrorType | undefined {
  if (isSuccess(status)) return undefined
  if (status === 429) return ErrorType.upstreamRateLimited
  if (status === 503 || status === 529) return ErrorType.upstreamOverloaded
  if (status === 504 || status === 524) return ErrorType.upstreamTimeout
  if (status >= 400 && status < 500) return ErrorType.clientRejected
  return ErrorType.upstreamError
}

/**
 * Provider error names (`StreamSummary.error`, lower-cased) by class. Sources:
 * https://docs.anthropic.com/en/api/errors, https://platform.openai.com/docs/guides/error-codes,
 * https://cloud.google.com/apis/design/errors,
 * https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html,
 * TGI's `error_type` (router/src/infer/mod.rs).
 */
const BY_PROVIDER_ERROR: ReadonlyMap<string, ErrorType> = new Map([
  // Rate limits and quotas.
  ['rate_limit_error', ErrorType.upstreamRateLimited],
  ['rate_limit_exceeded', ErrorType.upstreamRateLimited],
  ['insufficient_quota', ErrorType.upstreamRateLimited],
  ['tokens_exceeded', ErrorType.upstreamRateLimited],
  ['resource_exhausted', ErrorType.upstreamRateLimited],
  ['throttlingexception', ErrorType.upstreamRateLimited],
  ['too_many_requests', ErrorType.upstreamRateLimited],
  // No capacity now.
  ['overloaded_error', ErrorType.upstreamOverloaded],
  ['overloaded', ErrorType.upstreamOverloaded],
  ['server_overloaded', ErrorType.upstreamOverloaded],
  ['engine_overloaded', ErrorType.upstreamOverloaded],
  ['unavailable', ErrorType.upstreamOverloaded],
  ['serviceunavailableexception', ErrorType.upstreamOverloaded],
  ['modelnotreadyexception', ErrorType.upstreamOverloaded],
  // The provider's own failure.
  ['api_error', ErrorType.upstreamError],
  ['server_error', ErrorType.upstreamError],
  ['internal', ErrorType.upstreamError],
  ['internal_error', ErrorType.upstreamError],
  ['internalserverexception', ErrorType.upstreamError],
  ['internalservererror', ErrorType.upstreamError],
  ['modelstreamerrorexception', ErrorType.upstreamError],
  ['modelerrorexception', ErrorType.upstreamError],
  // The provider ran out of time.
  ['timeout_error', ErrorType.upstreamTimeout],
  ['deadline_exceeded', ErrorType.upstreamTimeout],
  ['modeltimeoutexception', ErrorType.upstreamTimeout],
  // The caller's request, refused.
  ['invalid_request_error', ErrorType.clientRejected],
  ['authentication_error', ErrorType.clientRejected],
  ['permission_error', ErrorType.clientRejected],
  ['not_found_error', ErrorType.clientRejected],
  ['request_too_large', ErrorType.clientRejected],
  ['invalid_argument', ErrorType.clientRejected],
  ['failed_precondition', ErrorType.clientRejected],
  ['permission_denied', ErrorType.clientRejected],
  ['unauthenticated', ErrorType.clientRejected],
  ['not_found', ErrorType.clientRejected],
  ['validationexception', ErrorType.clientRejected],
  ['accessdeniedexception', ErrorType.clientRejected],
  ['resourcenotfoundexception', ErrorType.clientRejected],
  ['validation', ErrorType.clientRejected],
  ['context_length_exceeded', ErrorType.clientRejected],
  ['invalid_prompt', ErrorType.clientRejected],
  ['badrequesterror', ErrorType.clientRejected],
  // OpenAI Realtime: a response.create while one is active.
  ['conversation_already_has_active_response', ErrorType.clientRejected],
])

/** The class of an error the upstream named, by the table or a status it names (vLLM's and Gemini's numeric `code`). */
export function errorTypeOfProviderError(name: string): ErrorType | undefined {
  const known = BY_PROVIDER_ERROR.get(name.toLowerCase())
  if (known !== undefined) return known
  if (/^[1-5]\d\d$/.test(name)) return errorTypeOfStatus(Number(name))
  return undefined
}

export interface FailureFacts {
  readonly outcome: string
  readonly statusCode: number
  readonly failure: FailureCode | undefined
  readonly failureDetail?: string
  readonly providerError: string | undefined
}

/**
 * The `error_type` of a finished request. An error answer whose body names a rate limit or an
 * overload takes that class over its status (a 500 saying `overloaded_error` is capacity); spans
 * call this too, so a trace and its series agree.
 */
export function errorTypeOf(f: FailureFacts): ErrorType {
  if (f.outcome === 'ok') return ErrorType.none
  if (f.outcome === 'cancelled') return ErrorType.clientCancelled
  if (f.failure !== undefined) return errorTypeOfFailure(f.failure, f.failureDetail)
  const named = f.providerError === undefined ? undefined : errorTypeOfProviderError(f.providerError)
  const byStatus = errorTypeOfStatus(f.statusCode)
  if (byStatus === undefined) return named ?? ErrorType.streamError
  if (named === ErrorType.upstreamRateLimited || named === ErrorType.upstreamOverloaded) return named
  return byStatus
}

/**
 * The class of a finished realtime response: `detail` is the provider's reason (an error code, a status detail),
 * `failure` the proxy's own (the worker serving it exited), which prevails.
 */
export function realtimeErrorTypeOf(outcome: string, detail: string | undefined, failure?: string): ErrorType {
  if (outcome === 'ok') return ErrorType.none
  if (outcome === 'cancelled') return ErrorType.clientCancelled
  if (failure !== undefined) return errorTypeOfFailure(failure)
  return (detail === undefined ? undefined : errorTypeOfProviderError(detail)) ?? ErrorType.streamError
}
