import { readFileSync } from 'node:fs'
import { STATUS_CODES } from 'node:http'
import { resolve } from 'node:path'
import { promisify } from 'node:util'
import { gzip } from 'node:zlib'
import { OTLPExporterError } from '@opentelemetry/otlp-exporter-base'
import type { ExportResponse, IExporterTransport } from '@opentelemetry/otlp-exporter-base'
import type { convertLegacyHttpOptions } from '@opentelemetry/otlp-exporter-base/node-http'
import { Agent, request } from 'undici'
import type { Env } from './config.ts'

/**
 * OTLP/HTTP through undici instead of the SDK's node:http transport. node:http's client objects
 * (ClientRequest, IncomingMessage) share their prototypes' functions with the proxy's own server
 * responses, so the first export taught V8 new shapes in the byte path's hottest functions and its
 * code stayed slower after (docs/performance.md, "Spans"); undici is already the proxy's upstream
 * client. The SDK's behaviour is kept: its configuration (config keys, then the `OTEL_EXPORTER_OTLP_*`
 * variables), its retries (https://opentelemetry.io/docs/specs/otlp/#otlphttp-throttling) and what
 * counts as retryable.
 */

const gzipAsync = promisify(gzip)

/** The SDK's retry schedule (otlp-exporter-base's retrying transport): 5 retries within the export's timeout. */
const MAX_RETRIES = 5
const INITIAL_BACKOFF_MS = 1000
const MAX_BACKOFF_MS = 5000
const BACKOFF_MULTIPLIER = 1.5
const JITTER = 0.2
/** A collector's answer is a small status message: more is read as a failure, as the SDK does. */
const MAX_RESPONSE_BYTES = 4 * 1024 * 1024

/** Statuses a collector answers when it is busy (OTLP/HTTP: 429, 502, 503, 504 are retryable). */
const RETRYABLE_STATUS = new Set([429, 502, 503, 504])
/** Network errors worth another attempt: the collector may be back (the SDK's list, plus undici's own). */
const RETRYABLE_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ENOTFOUND',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
])

const USER_AGENT = 'tokentap OTel-OTLP-Exporter-JavaScript'

/** The TLS files the standard variables name (`OTEL_EXPORTER_OTLP_{SIGNAL_}CERTIFICATE`, `…CLIENT_CERTIFICATE`, `…CLIENT_KEY`), as the SDK reads them. */
/** The exporter settings the SDK resolves from the config and the variables. */
type OtlpNodeHttpConfiguration = ReturnType<typeof convertLegacyHttpOptions>

export function tlsFromEnv(signal: string, env: Env = process.env): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  const file = (name: string): Buffer | undefined => {
    const path = env[`OTEL_EXPORTER_OTLP_${signal}_${name}`]?.trim() || env[`OTEL_EXPORTER_OTLP_${name}`]?.trim()
    return path === undefined || path === '' ? undefined : readFileSync(resolve(path))
  }
  return { ca: file('CERTIFICATE'), cert: file('CLIENT_CERTIFICATE'), key: file('CLIENT_KEY') }
}

export class UndiciOtlpTransport implements IExporterTransport {
  readonly #config: OtlpNodeHttpConfiguration
  readonly #agent: Agent

  constructor(config: OtlpNodeHttpConfiguration, tls: { ca?: Buffer; cert?: Buffer; key?: Buffer } = {}) {
    this.#config = config
    // An agent of its own: closing it at shutdown leaves the upstreams' pools alone.
    this.#agent = new Agent({ connections: 2, connect: tls })
  }

  async send(data: Uint8Array, timeoutMillis: number): Promise<ExportResponse> {
    const deadline = Date.now() + timeoutMillis
    let backoff = INITIAL_BACKOFF_MS
    let result = await this.#sendOnce(data, timeoutMillis)
    for (let retries = 0; result.status === 'retryable' && retries < MAX_RETRIES; retries++) {
      const jittered = Math.min(backoff * (1 + (Math.random() * 2 - 1) * JITTER), MAX_BACKOFF_MS)
      backoff *= BACKOFF_MULTIPLIER
      const wait = result.retryInMillis ?? jittered
      const left = deadline - Date.now()
      if (wait > left) return result
      await new Promise((r) => setTimeout(r, Math.max(0, wait)))
      result = await this.#sendOnce(data, deadline - Date.now())
    }
    return result
  }

  async #sendOnce(data: Uint8Array, timeoutMillis: number): Promise<ExportResponse> {
    const headers: Record<string, string> = { ...(await this.#config.headers()) }
    headers['User-Agent'] =
      this.#config.userAgent === undefined ? USER_AGENT : `${this.#config.userAgent} ${USER_AGENT}`
    let body = data
    if (this.#config.compression === 'gzip') {
      body = await gzipAsync(data)
      headers['Content-Encoding'] = 'gzip'
    }
    try {
      const res = await request(this.#config.url, {
        method: 'POST',
        headers,
        body,
        dispatcher: this.#agent,
        signal: AbortSignal.timeout(Math.max(1, timeoutMillis)),
      })
      const chunks: Buffer[] = []
      let size = 0
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length
        if (size > MAX_RESPONSE_BYTES) {
          res.body.destroy()
          return {
            status: 'failure',
            error: new Error(`OTLP export response body exceeded ${MAX_RESPONSE_BYTES} bytes`),
          }
        }
        chunks.push(chunk)
      }
      const status = res.statusCode
      if (status >= 200 && status <= 299) return { status: 'success', data: Buffer.concat(chunks) }
      if (RETRYABLE_STATUS.has(status))
        return { status: 'retryable', retryInMillis: retryAfterMs(res.headers['retry-after']) }
      return {
        status: 'failure',
        error: new OTLPExporterError(STATUS_CODES[status], status, Buffer.concat(chunks).toString()),
      }
    } catch (err) {
      const e = err as Error & { code?: unknown }
      if (e.name === 'TimeoutError') return { status: 'retryable', error: new Error('Request timed out') }
      if (typeof e.code === 'string' && RETRYABLE_CODES.has(e.code)) return { status: 'retryable', error: e }
      return { status: 'failure', error: e }
    }
  }

  shutdown(): void {
    // The delegate has awaited its exports: nothing is in flight.
    this.#agent.close().catch(() => {})
  }
}

/** `Retry-After` in seconds or as a date (https://httpwg.org/specs/rfc9110.html#field.retry-after), as the SDK parses it. */
export function retryAfterMs(header: string | string[] | undefined): number | undefined {
  const value = Array.isArray(header) ? header[0] : header
  if (value === undefined) return undefined
  const seconds = Number.parseInt(value, 10)
  if (Number.isInteger(seconds)) return seconds > 0 ? seconds * 1000 : -1
  const delay = new Date(value).getTime() - Date.now()
  return Math.max(delay || 0, 0) // an unreadable date: at once
}
