import type { Logger } from 'pino'
import type { OtelConfig, OtelProtocol, TracesConfig } from '../../config/schema.ts'
import { genAiProviderName } from '../../parsers/registry.ts'
import type { TraceSampling } from '../../timing/trace-sampling.ts'

/** The OTel exports' settings, without the SDK: load.ts imports the slow-loading SDK only when an export is on. */

/** Where the `OTEL_*` variables are read. */
export type Env = Readonly<Record<string, string | undefined>>

export function metricsUrl(endpoint: string): string {
  const base = endpoint.replace(/\/+$/, '')
  return base.endsWith('/v1/metrics') ? base : `${base}/v1/metrics`
}

/** `gen_ai.provider.name` of a tokentap provider name (the registry knows each provider's). */
export const genAiProvider = (provider: string): string => genAiProviderName(provider)

/** An empty variable counts as unset, as the OTel spec says. */
const fromEnv = (env: Env, name: string): string | undefined => {
  const v = env[name]?.trim()
  return v === undefined || v === '' ? undefined : v
}

/**
 * Whether to export: `otel.endpoint` or a standard endpoint variable, unless `OTEL_SDK_DISABLED=true`
 * or `OTEL_METRICS_EXPORTER=none`, as for any OTel SDK.
 */
export function otelEnabled(config: OtelConfig, env: Env = process.env): boolean {
  if (fromEnv(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return false
  if (fromEnv(env, 'OTEL_METRICS_EXPORTER')?.toLowerCase() === 'none') return false
  return (
    config.endpoint !== undefined ||
    fromEnv(env, 'OTEL_EXPORTER_OTLP_METRICS_ENDPOINT') !== undefined ||
    fromEnv(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') !== undefined
  )
}

/** `otel.protocol`, else `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else protobuf. */
export function otelProtocol(config: OtelConfig, env: Env = process.env, logger?: Logger): OtelProtocol {
  const wanted =
    config.protocol ??
    fromEnv(env, 'OTEL_EXPORTER_OTLP_METRICS_PROTOCOL') ??
    fromEnv(env, 'OTEL_EXPORTER_OTLP_PROTOCOL')
  if (wanted === 'http/json') return 'http/json'
  // gRPC would need a second transport stack for one request a minute; OTLP/HTTP is what every collector takes.
  if (wanted !== undefined && wanted !== 'http/protobuf')
    logger?.warn({ protocol: wanted }, 'OTLP protocol not supported, using http/protobuf')
  return 'http/protobuf'
}

/** Explicit or exponential points: `otel.histograms`, else `OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION`, else explicit. */
export function otelHistograms(config: OtelConfig, env: Env = process.env): 'explicit' | 'exponential' {
  if (config.histograms !== undefined) return config.histograms
  return fromEnv(env, 'OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION')?.toLowerCase() ===
    'base2_exponential_bucket_histogram'
    ? 'exponential'
    : 'explicit'
}

function tracesUrl(endpoint: string): string {
  const base = endpoint.replace(/\/+$/, '')
  return base.endsWith('/v1/traces') ? base : `${base}/v1/traces`
}

/**
 * The traces config when `otel.traces` is given (off by default: a span per request costs more than
 * a metrics export), unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
 */
export function tracesConfig(config: OtelConfig, env: Env = process.env): TracesConfig | undefined {
  if (config.traces === undefined) return undefined
  if (
    fromEnv(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true' ||
    fromEnv(env, 'OTEL_TRACES_EXPORTER')?.toLowerCase() === 'none'
  )
    return undefined
  return config.traces
}

/** The traces URL: `otel.traces.endpoint`, else `otel.endpoint`'s; undefined leaves it to the exporter's variables. */
export function tracesEndpoint(config: OtelConfig): string | undefined {
  const endpoint = config.traces?.endpoint ?? config.endpoint
  return endpoint === undefined ? undefined : tracesUrl(endpoint)
}

/** The sampling settings the recording policy decides with. */
export function traceSampling(traces: TracesConfig): TraceSampling {
  return { ratio: traces.sample.ratio, keep: traces.sample.keep, slowSeconds: traces.sample.slow_seconds }
}
