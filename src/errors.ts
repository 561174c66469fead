/** Every error tokentap raises, in one table: a stable code, a message template (`%s` in order) and, if answered, the HTTP status. */

const ERRORS = {
  TOKENTAP_ERR_CONFIG_READ: { message: "cannot read config file '%s': %s", status: undefined },
  TOKENTAP_ERR_CONFIG_YAML: { message: "config file '%s' is not valid YAML: %s", status: undefined },
  TOKENTAP_ERR_CONFIG_INVALID: { message: 'invalid configuration: %s', status: undefined },
  TOKENTAP_ERR_ENV_INVALID: { message: "environment variable %s='%s' is not valid: %s", status: undefined },
  TOKENTAP_ERR_UPSTREAM_CONNECT: { message: 'cannot connect to the upstream: %s', status: 502 },
  TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT: { message: 'the upstream sent no response headers within %s ms', status: 504 },
  TOKENTAP_ERR_UPSTREAM_TIMEOUT: { message: 'the upstream request took longer than %s ms', status: 504 },
  TOKENTAP_ERR_UPSTREAM_FAILED: { message: 'the upstream request failed: %s', status: 502 },
  TOKENTAP_ERR_UPSTREAM_RESET: { message: 'the upstream broke off the response: %s', status: 502 },
  TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT: { message: 'the upstream sent nothing for %s ms', status: 504 },
  TOKENTAP_ERR_BODY_TOO_LARGE: { message: 'request body is larger than the limit of %s bytes', status: 413 },
  TOKENTAP_ERR_CLIENT_BODY_TIMEOUT: { message: 'the client sent nothing of the request body for %s ms', status: 408 },
  TOKENTAP_ERR_BAD_REQUEST: { message: 'bad request: %s', status: 400 },
  TOKENTAP_ERR_BAD_TARGET: { message: 'the request target is not a path the proxy can forward: %s', status: 400 },
  TOKENTAP_ERR_TOO_MANY_HEADERS: {
    message: 'the request has %s header fields; the proxy forwards at most %s',
    status: 431,
  },
  TOKENTAP_ERR_NOT_FOUND: { message: 'no route for this method and path', status: 404 },
  TOKENTAP_ERR_UPSTREAM_BAD_RESPONSE: { message: 'the upstream response head cannot be relayed: %s', status: 502 },
  TOKENTAP_ERR_SHUTTING_DOWN: { message: 'tokentap is shutting down', status: 503 },
  TOKENTAP_ERR_INTERNAL: { message: 'internal proxy error: %s', status: 500 },
  /** The client closed the connection: what aborts the upstream request (never answered: no one is there). */
  TOKENTAP_ERR_CLIENT_GONE: { message: 'the client closed the connection', status: undefined },
  /** The embedding app's own hooks answered (a rate limit, an API-key check) before the proxy saw the request (never answered by tokentap). */
  TOKENTAP_ERR_APP_ANSWERED: {
    message: "the embedding app's hooks answered the request before the proxy: %s",
    status: undefined,
  },
  TOKENTAP_ERR_PLUGIN_MISSING: {
    message: '%s: register the tokentap plugin on this instance first',
    status: undefined,
  },
  TOKENTAP_ERR_WORKER: { message: 'worker %s: %s', status: undefined },
  /** The cluster worker serving the request exited while it was in flight; the primary records it (cluster/progress.ts). */
  TOKENTAP_ERR_WORKER_EXITED: { message: 'the worker serving the request exited (%s)', status: undefined },
  TOKENTAP_ERR_LISTEN: { message: 'the %s cannot listen on %s: %s; %s', status: undefined },
} as const satisfies Record<string, { readonly message: string; readonly status: number | undefined }>

export type ErrorCode = keyof typeof ERRORS

/** Why a request failed (the log line's `error`, OpenTelemetry's `error.type`): always a table code, never a library's bare string. */
export type FailureCode = ErrorCode

export class TokentapError extends Error {
  readonly code: ErrorCode
  /** The HTTP status a client is answered with; undefined for errors no client sees (config, workers). */
  readonly statusCode: number | undefined
  /** The underlying library's code (undici's, the socket's), when this error stands for one: the failure's class may depend on it (record/error-type.ts). */
  detail: string | undefined

  constructor(code: ErrorCode, ...args: (string | number)[]) {
    let i = 0
    super(ERRORS[code].message.replace(/%s/g, () => String(args[i++] ?? '')))
    this.name = 'TokentapError'
    this.code = code
    this.statusCode = ERRORS[code].status
  }

  /** The status a client is answered with (500 should an error meant for no client reach one). */
  get httpStatus(): number {
    return this.statusCode ?? 500
  }

  /** The JSON body a client gets, in OpenAI's error shape, which every SDK shows (https://platform.openai.com/docs/guides/error-codes). */
  toBody(): string {
    return JSON.stringify({ error: { message: this.message, type: 'proxy_error', code: this.code } })
  }
}
