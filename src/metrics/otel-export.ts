import type { Logger } from 'pino'
import type { OtelConfig } from '../config/schema.ts'
import type { OtelMetrics, OtlpKeyValue } from './otel.ts'

/**
 * Periodic OTLP/HTTP export (JSON encoding, https://opentelemetry.io/docs/specs/otlp/#otlphttp)
 * of the in-memory GenAI histograms to `${endpoint}/v1/metrics`. Off the hot path: a timer
 * builds one request per interval; a slow or failing collector only costs that request.
 */

/** `${endpoint}/v1/metrics`, unless the endpoint already names the metrics path. */
export function metricsUrl(endpoint: string): string {
  const base = endpoint.replace(/\/+$/, '')
  return base.endsWith('/v1/metrics') ? base : `${base}/v1/metrics`
}

const nowNs = (): bigint => BigInt(Date.now()) * 1_000_000n

export class OtelExporter {
  readonly #metrics: OtelMetrics
  readonly #config: OtelConfig & { readonly endpoint: string }
  readonly #logger: Logger
  readonly #resource: readonly OtlpKeyValue[]
  readonly #version: string
  readonly #start = nowNs()
  #timer: NodeJS.Timeout | undefined
  #running: Promise<void> | undefined
  #failing = false

  constructor(metrics: OtelMetrics, config: OtelConfig & { readonly endpoint: string }, logger: Logger, resource: readonly OtlpKeyValue[], version: string) {
    this.#metrics = metrics
    this.#config = config
    this.#logger = logger
    this.#resource = resource
    this.#version = version
  }

  start(): void {
    if (this.#timer !== undefined) return
    this.#timer = setInterval(() => void this.flush(), this.#config.interval_ms)
    // The exporter never keeps the process alive by itself.
    this.#timer.unref()
  }

  /** Exports now (waits for an export already running instead of overlapping it). Never throws. */
  async flush(): Promise<void> {
    while (this.#running !== undefined) await this.#running
    const run = this.#export().finally(() => (this.#running = undefined))
    this.#running = run
    return run
  }

  /** Stops the timer and sends a last export. */
  async shutdown(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
    await this.flush()
  }

  async #export(): Promise<void> {
    const body = this.#metrics.toOtlp(this.#resource, this.#start, nowNs(), this.#version)
    if (body === undefined) return
    const url = metricsUrl(this.#config.endpoint)
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { ...this.#config.headers, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.#config.timeout_ms),
      })
      // Drain the body so the connection can be reused.
      await res.arrayBuffer()
      if (!res.ok) throw new Error(`HTTP ${res.status}`)
      if (this.#failing) this.#logger.info({ url }, 'OTLP metrics export works again')
      this.#failing = false
    } catch (err) {
      // Warn once per outage, not once per interval.
      if (!this.#failing) this.#logger.warn({ url, err: (err as Error).message }, 'OTLP metrics export failed')
      this.#failing = true
    }
  }
}
