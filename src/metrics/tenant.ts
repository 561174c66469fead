import { createHmac } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import { MAX_VALUE_LENGTH } from './label-limiter.ts'

/**
 * The `tenant` label (`metrics.tenant`), resolved once per request from its headers: a header's
 * value (cut to the label length limit), or with `from: api_key` the first 12 hex digits of
 * HMAC-SHA256(secret, API key). `none` when the request carries neither; `other` once
 * `max_values` distinct values have been admitted in this process (`none` and `other` do not
 * count). The API key itself is read here and nowhere kept: only its keyed hash leaves this file,
 * and without the secret a hash cannot be checked against guessed keys.
 */

export const TENANT_NONE = 'none'
const TENANT_OTHER = 'other'

export interface TenantOptions {
  readonly header?: string
  readonly from?: 'header' | 'api_key'
  readonly secret?: string
  readonly max_values: number
}

/** Hex digits of the HMAC kept: 48 bits tell apart far more keys than a label set can hold. */
const HASH_HEX = 12

/** Headers that carry an API key, in the order they are looked at (OpenAI, Anthropic, Azure, Gemini). */
const KEY_HEADERS = ['x-api-key', 'api-key', 'x-goog-api-key'] as const
/** A browser's OpenAI Realtime connection sends its key as a WebSocket subprotocol. */
const SUBPROTOCOL_KEY = 'openai-insecure-api-key.'

/** The first value of a header Node may have joined or kept as a list. */
function headerValue(v: string | string[] | undefined): string | undefined {
  const s = Array.isArray(v) ? v[0] : v
  return s === undefined ? undefined : s.trim()
}

/**
 * The request's API key: the `Authorization` credentials (a Bearer token; for AWS SigV4 the
 * access key id of `Credential=`, since the rest changes every request), else `x-api-key`,
 * `api-key`, `x-goog-api-key`, the `key` query parameter (Gemini), or an OpenAI Realtime
 * subprotocol. Undefined when none.
 */
export function apiKeyOf(headers: IncomingHttpHeaders, pathAndQuery: string): string | undefined {
  const auth = headerValue(headers.authorization)
  if (auth !== undefined && auth !== '') {
    const sigv4 = /^AWS4-HMAC-SHA256\s.*Credential=([^/,\s]+)/i.exec(auth)
    if (sigv4 !== null) return sigv4[1]
    const space = auth.indexOf(' ')
    const credentials = space < 0 ? auth : auth.slice(space + 1).trim()
    if (credentials !== '') return credentials
  }
  for (const name of KEY_HEADERS) {
    const v = headerValue(headers[name])
    if (v !== undefined && v !== '') return v
  }
  const q = pathAndQuery.indexOf('?')
  if (q >= 0) {
    const key = new URLSearchParams(pathAndQuery.slice(q + 1)).get('key')
    if (key !== null && key !== '') return key
  }
  const protocols = headerValue(headers['sec-websocket-protocol'])
  if (protocols !== undefined) {
    for (const p of protocols.split(',')) {
      const t = p.trim()
      if (t.startsWith(SUBPROTOCOL_KEY) && t.length > SUBPROTOCOL_KEY.length) return t.slice(SUBPROTOCOL_KEY.length)
    }
  }
  return undefined
}

export class TenantResolver {
  readonly #header: string | undefined
  readonly #secret: string | undefined
  readonly #max: number
  readonly #seen = new Set<string>()

  constructor(options: TenantOptions) {
    this.#max = options.max_values
    if (options.from === 'api_key') this.#secret = options.secret
    else this.#header = options.header?.toLowerCase()
  }

  /** The tenant label value of a request with these headers and this target (path and query). */
  resolve(headers: IncomingHttpHeaders, pathAndQuery: string): string {
    const raw = this.#raw(headers, pathAndQuery)
    if (raw === undefined || raw === '') return TENANT_NONE
    const value = raw.length > MAX_VALUE_LENGTH ? raw.slice(0, MAX_VALUE_LENGTH) : raw
    if (value === TENANT_NONE || value === TENANT_OTHER || this.#seen.has(value)) return value
    if (this.#seen.size >= this.#max) return TENANT_OTHER
    this.#seen.add(value)
    return value
  }

  #raw(headers: IncomingHttpHeaders, pathAndQuery: string): string | undefined {
    if (this.#secret === undefined) return this.#header === undefined ? undefined : headerValue(headers[this.#header])
    const key = apiKeyOf(headers, pathAndQuery)
    return key === undefined ? undefined : createHmac('sha256', this.#secret).update(key).digest('hex').slice(0, HASH_HEX)
  }
}
