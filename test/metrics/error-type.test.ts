import t from 'tap'
import { ERROR_TYPES, errorTypeOf, errorTypeOfFailure, errorTypeOfProviderError, errorTypeOfStatus, realtimeErrorTypeOf } from '../../src/record/error-type.ts'

t.test("the closed set is the contract's, in its order", async (t) => {
  t.same(ERROR_TYPES, [
    'none',
    'upstream_rate_limited',
    'upstream_overloaded',
    'upstream_error',
    'upstream_timeout',
    'upstream_unreachable',
    'upstream_reset',
    'stream_error',
    'client_rejected',
    'client_cancelled',
    'client_timeout',
    'policy',
    'proxy_error',
    'worker_exited',
  ])
})

t.test('every failure code has its class, and a connect timeout is a timeout, not a refusal', async (t) => {
  t.same(
    [
      'TOKENTAP_ERR_UPSTREAM_CONNECT',
      'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT',
      'TOKENTAP_ERR_UPSTREAM_TIMEOUT',
      'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT',
      'TOKENTAP_ERR_UPSTREAM_FAILED',
      'TOKENTAP_ERR_UPSTREAM_RESET',
      'TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE',
      'TOKENTAP_ERR_BODY_TOO_LARGE',
      'TOKENTAP_ERR_BAD_TARGET',
      'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT',
      'TOKENTAP_ERR_CLIENT_GONE',
      'TOKENTAP_ERR_APP_ANSWERED',
      'TOKENTAP_ERR_SHUTTING_DOWN',
      'TOKENTAP_ERR_INTERNAL',
      'TOKENTAP_ERR_WORKER_EXITED',
    ].map((code) => errorTypeOfFailure(code)),
    [
      'upstream_unreachable',
      'upstream_timeout',
      'upstream_timeout',
      'upstream_timeout',
      'upstream_unreachable',
      'upstream_reset',
      'upstream_error',
      'client_rejected',
      'client_rejected',
      'client_timeout',
      'client_cancelled',
      'policy',
      'proxy_error',
      'proxy_error',
      'worker_exited',
    ],
  )
  t.equal(errorTypeOfFailure('TOKENTAP_ERR_UPSTREAM_CONNECT', 'UND_ERR_CONNECT_TIMEOUT'), 'upstream_timeout')
  t.equal(errorTypeOfFailure('TOKENTAP_ERR_UPSTREAM_CONNECT', 'ECONNREFUSED'), 'upstream_unreachable')
  t.equal(errorTypeOfFailure('TOKENTAP_ERR_NOT_A_CODE'), 'proxy_error', 'a code the table does not know is the proxy’s own')
})

t.test('statuses: 429 rate-limited, 503/529 overloaded, 504/524 timeouts, other 5xx upstream errors, other 4xx the caller’s', async (t) => {
  t.same([200, 204, 429, 503, 529, 504, 524, 500, 502, 400, 401, 403, 404, 413, 422, 302, 101].map(errorTypeOfStatus), [
    undefined,
    undefined,
    'upstream_rate_limited',
    'upstream_overloaded',
    'upstream_overloaded',
    'upstream_timeout',
    'upstream_timeout',
    'upstream_error',
    'upstream_error',
    'client_rejected',
    'client_rejected',
    'client_rejected',
    'client_rejected',
    'client_rejected',
    'client_rejected',
    'upstream_error',
    'upstream_error',
  ])
})

t.test("each provider's error names map to their class, whatever the case; numeric codes by status; unknown names say nothing", async (t) => {
  const cases: [string, string | undefined][] = [
    // Anthropic
    ['overloaded_error', 'upstream_overloaded'],
    ['rate_limit_error', 'upstream_rate_limited'],
    ['api_error', 'upstream_error'],
    ['timeout_error', 'upstream_timeout'],
    ['invalid_request_error', 'client_rejected'],
    ['authentication_error', 'client_rejected'],
    // OpenAI (chat, Responses, Realtime)
    ['rate_limit_exceeded', 'upstream_rate_limited'],
    ['insufficient_quota', 'upstream_rate_limited'],
    ['server_error', 'upstream_error'],
    ['context_length_exceeded', 'client_rejected'],
    // Gemini's canonical statuses
    ['RESOURCE_EXHAUSTED', 'upstream_rate_limited'],
    ['UNAVAILABLE', 'upstream_overloaded'],
    ['INTERNAL', 'upstream_error'],
    ['DEADLINE_EXCEEDED', 'upstream_timeout'],
    ['INVALID_ARGUMENT', 'client_rejected'],
    // Bedrock exceptions (event stream :exception-type, or the JSON chunk's name)
    ['throttlingException', 'upstream_rate_limited'],
    ['ThrottlingException', 'upstream_rate_limited'],
    ['serviceUnavailableException', 'upstream_overloaded'],
    ['internalServerException', 'upstream_error'],
    ['modelStreamErrorException', 'upstream_error'],
    ['modelTimeoutException', 'upstream_timeout'],
    ['validationException', 'client_rejected'],
    // TGI's error_type
    ['overloaded', 'upstream_overloaded'],
    ['validation', 'client_rejected'],
    ['generation', undefined],
    // vLLM's numeric code, Gemini's numeric code
    ['429', 'upstream_rate_limited'],
    ['500', 'upstream_error'],
    ['400', 'client_rejected'],
    ['the model crashed', undefined],
    ['error', undefined],
  ]
  t.same(
    cases.map(([name]) => errorTypeOfProviderError(name)),
    cases.map(([, type]) => type),
  )
})

t.test('a request’s class: ok is none, the client leaving wins, then the failure, then the status unless the body names capacity, then the stream’s error', async (t) => {
  const base = { outcome: 'error', statusCode: 200, failure: undefined, providerError: undefined }
  t.equal(errorTypeOf({ ...base, outcome: 'ok' }), 'none')
  t.equal(errorTypeOf({ ...base, outcome: 'cancelled', statusCode: 499 }), 'client_cancelled')
  t.equal(errorTypeOf({ ...base, statusCode: 502, failure: 'TOKENTAP_ERR_UPSTREAM_RESET', providerError: 'overloaded_error' }), 'upstream_reset')
  t.equal(errorTypeOf({ ...base, statusCode: 502, failure: 'TOKENTAP_ERR_UPSTREAM_CONNECT', failureDetail: 'UND_ERR_CONNECT_TIMEOUT' }), 'upstream_timeout')
  t.equal(errorTypeOf({ ...base, statusCode: 500, providerError: 'overloaded_error' }), 'upstream_overloaded', 'a 500 that says overloaded is capacity')
  t.equal(errorTypeOf({ ...base, statusCode: 400, providerError: 'rate_limit_exceeded' }), 'upstream_rate_limited')
  t.equal(errorTypeOf({ ...base, statusCode: 503, providerError: 'server_error' }), 'upstream_overloaded', 'the status wins over a body that names nothing more specific')
  t.equal(errorTypeOf({ ...base, statusCode: 401, providerError: 'invalid_request_error' }), 'client_rejected')
  t.equal(errorTypeOf({ ...base, providerError: 'overloaded_error' }), 'upstream_overloaded', 'an error event in a 200 stream, by what it says')
  t.equal(errorTypeOf({ ...base, providerError: 'something odd' }), 'stream_error')
  t.equal(errorTypeOf(base), 'stream_error', 'an error outcome on a 2xx with nothing named')
})

t.test('a realtime response’s class: none, client_cancelled, the proxy’s own failure (worker_exited), or what its error code says (stream_error when nothing)', async (t) => {
  t.same(
    [
      realtimeErrorTypeOf('ok', undefined),
      realtimeErrorTypeOf('cancelled', 'turn_detected'),
      realtimeErrorTypeOf('error', 'rate_limit_exceeded'),
      realtimeErrorTypeOf('error', 'server_error'),
      realtimeErrorTypeOf('error', 'conversation_already_has_active_response'),
      realtimeErrorTypeOf('error', undefined),
      realtimeErrorTypeOf('error', 'server_error', 'TOKENTAP_ERR_WORKER_EXITED'),
    ],
    ['none', 'client_cancelled', 'upstream_rate_limited', 'upstream_error', 'client_rejected', 'stream_error', 'worker_exited'],
  )
})
