import type { Logger } from 'pino'
import type { OtelConfig, TracesConfig } from '../../config/schema.ts'
import type { OtelMetrics } from './otel-metrics.ts'
import type { OtelTraces, OtelTracesOptions } from './traces.ts'

/** The one way into the OpenTelemetry exports: the slow-loading SDK is imported only when an export is on. */
export interface OtelExports {
  readonly metrics?: OtelMetrics
  readonly traces?: OtelTraces
}

export interface LoadOtelOptions extends Omit<OtelTracesOptions, 'traces'> {
  readonly config: OtelConfig
  readonly logger: Logger
  /** Export the GenAI metrics (config.ts's `otelEnabled`). */
  readonly metrics: boolean
  /** Export spans with these settings (config.ts's `tracesConfig`); undefined: no spans. */
  readonly traces: TracesConfig | undefined
}

export async function loadOtel({ metrics, traces, ...options }: LoadOtelOptions): Promise<OtelExports> {
  const otelMetrics = metrics
    ? new (await import('./otel-metrics.ts')).OtelMetrics({ config: options.config, logger: options.logger })
    : undefined
  if (traces === undefined) return { metrics: otelMetrics }
  return { metrics: otelMetrics, traces: new (await import('./traces.ts')).OtelTraces({ ...options, traces }) }
}
