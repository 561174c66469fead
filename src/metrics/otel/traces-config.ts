import type { OtelConfig, TracesConfig } from '../../config/schema.ts'
import type { TraceSampling } from '../../timing/trace-sampling.ts'
import type { Env } from './config.ts'
import type { OtelTraces, OtelTracesOptions } from './traces.ts'

/**
 * The span export's switch and settings, without the SDK (loaded only when traces are on, as
 * the metrics SDK is: `loadOtelTraces`).
 */

/** `${endpoint}/v1/traces`, unless the endpoint already names the traces path. */
function tracesUrl(endpoint: string): string {
  const base = endpoint.replace(/\/+$/, '')
  return base.endsWith('/v1/traces') ? base : `${base}/v1/traces`
}

const isSet = (env: Env, name: string): string | undefined => {
  const v = env[name]?.trim()
  return v === undefined || v === '' ? undefined : v.toLowerCase()
}

/**
 * The traces config when spans are exported: `otel.traces` given (off by default, a span per
 * request is more than a metrics export), unless `OTEL_SDK_DISABLED=true` or
 * `OTEL_TRACES_EXPORTER=none` say no, as they do for any OTel SDK.
 */
export function tracesConfig(config: OtelConfig, env: Env = process.env): TracesConfig | undefined {
  if (config.traces === undefined) return undefined
  if (isSet(env, 'OTEL_SDK_DISABLED') === 'true' || isSet(env, 'OTEL_TRACES_EXPORTER') === 'none') return undefined
  return config.traces
}

/**
 * The traces URL: `otel.traces.endpoint`, else `otel.endpoint`'s; undefined leaves it to the
 * exporter (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4318).
 */
export function tracesEndpoint(config: OtelConfig): string | undefined {
  const endpoint = config.traces?.endpoint ?? config.endpoint
  return endpoint === undefined ? undefined : tracesUrl(endpoint)
}

/** The sampling settings the recording policy decides with. */
export function traceSampling(traces: TracesConfig): TraceSampling {
  return { ratio: traces.sample.ratio, keep: traces.sample.keep, slowSeconds: traces.sample.slow_seconds }
}

/** The span export, the SDK loaded on first use. */
export async function loadOtelTraces(options: OtelTracesOptions): Promise<OtelTraces> {
  const { OtelTraces } = await import('./traces.ts')
  return new OtelTraces(options)
}
