import { createHmac } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import { MAX_VALUE_LENGTH } from './labels.ts'

/**
 * The `tenant` label (`metrics.tenant`), resolved once per request: a header's value or, with `from: api_key`, the
 * first 12 hex digits of HMAC-SHA256(secret, key), so without the secret a hash cannot be checked against guessed keys.
 * `none` without either, `other` past `max_values`; the key itself is never kept.
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
 * Authorization scheme words (RFC 9110 §11.4 and the IANA registry): a header of only one carries no credentials
 * (`Bearer ` with an empty token reaches Node as `Bearer`); any other lone word is a bare key, as some clients send.
 */
const SCHEME_WORDS = new Set([
  'bearer',
  'basic',
  'token',
  'apikey',
  'api-key',
  'key',
  'digest',
  'dpop',
  'negotiate',
  'ntlm',
  'aws4-hmac-sha256',
])

/** The key of an `Authorization` value, or undefined when it carries none. */
function authorizationKey(auth: string): string | undefined {
  const space = auth.search(/\s/)
  if (space < 0) return SCHEME_WORDS.has(auth.toLowerCase()) ? undefined : auth
  const scheme = auth.slice(0, space).toLowerCase()
  const credentials = auth.slice(space + 1).trim()
  // SigV4: only the access key id is stable (the signature changes every request); none without one.
  if (scheme === 'aws4-hmac-sha256') return /Credential=([^/,\s]+)/i.exec(credentials)?.[1]
  // Basic: base64 of `user:password`; both empty (`Og==`) is no key.
  if (scheme === 'basic' && /^[:\s]*$/.test(Buffer.from(credentials, 'base64').toString('latin1'))) return undefined
  return credentials === '' ? undefined : credentials
}

/** The request's API key from `Authorization` (SigV4: the access key id), the API-key headers, Gemini's `key` query or a Realtime subprotocol. */
export function apiKeyOf(headers: IncomingHttpHeaders, pathAndQuery: string): string | undefined {
  const auth = headerValue(headers.authorization)
  if (auth !== undefined && auth !== '') {
    const key = authorizationKey(auth)
    if (key !== undefined) return key
  }
  for (const name of KEY_HEADERS) {
    const v = headerValue(headers[name])
    if (v !== undefined && v !== '') return v
  }
  const q = pathAndQuery.indexOf('?')
  if (q >= 0) {
    const key = new URLSearchParams(pathAndQuery.slice(q + 1)).get('key')?.trim()
    if (key !== undefined && key !== '') return key
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
    return key === undefined
      ? undefined
      : createHmac('sha256', this.#secret).update(key).digest('hex').slice(0, HASH_HEX)
  }
}
