import { ExportResultCode } from '@opentelemetry/core'
import type { ExportResult } from '@opentelemetry/core'
import { OTLPMetricExporter as JsonExporter } from '@opentelemetry/exporter-metrics-otlp-http'
import { OTLPMetricExporter as ProtobufExporter } from '@opentelemetry/exporter-metrics-otlp-proto'
import type {
  AggregationOption,
  AggregationTemporality,
  InstrumentType,
  PushMetricExporter,
  ResourceMetrics,
} from '@opentelemetry/sdk-metrics'
import type { Logger } from 'pino'
import type { OtelConfig, OtelProtocol } from '../../config/schema.ts'
import { metricsUrl } from './config.ts'

/**
 * The OTLP/HTTP exporter of the GenAI metrics (the SDK's, protobuf or JSON): tokentap's config
 * keys win, the standard variables fill the rest (https://opentelemetry.io/docs/specs/otel/protocol/exporter/).
 */

/** The SDK exporter for the config (the variables fill in what the config leaves unset). */
export function createOtlpExporter(config: OtelConfig, protocol: OtelProtocol): PushMetricExporter {
  const options = {
    // A config endpoint is a base URL, like OTEL_EXPORTER_OTLP_ENDPOINT; the SDK takes `url` as the full one.
    url: config.endpoint === undefined ? undefined : metricsUrl(config.endpoint),
    headers: Object.keys(config.headers).length === 0 ? undefined : { ...config.headers },
    timeoutMillis: config.timeout_ms,
  }
  return protocol === 'http/json' ? new JsonExporter(options) : new ProtobufExporter(options)
}

/** Wraps an exporter to log one warning per outage and a line on recovery: the SDK reports only to the silent `diag`. */
export class LoggedExporter implements PushMetricExporter {
  readonly #inner: PushMetricExporter
  readonly #logger: Logger
  readonly #protocol: OtelProtocol
  #failing = false
  // The reader asks the exporter for temporality and aggregation: the inner exporter answers.
  readonly selectAggregationTemporality?: (type: InstrumentType) => AggregationTemporality
  readonly selectAggregation?: (type: InstrumentType) => AggregationOption

  constructor(inner: PushMetricExporter, logger: Logger, protocol: OtelProtocol) {
    this.#inner = inner
    this.#logger = logger
    this.#protocol = protocol
    this.selectAggregationTemporality = inner.selectAggregationTemporality?.bind(inner)
    this.selectAggregation = inner.selectAggregation?.bind(inner)
  }

  export(metrics: ResourceMetrics, resultCallback: (result: ExportResult) => void): void {
    this.#inner.export(metrics, (result) => {
      if (result.code === ExportResultCode.SUCCESS) {
        if (this.#failing) this.#logger.info({ protocol: this.#protocol }, 'OTLP metrics export works again')
        this.#failing = false
      } else {
        if (!this.#failing)
          this.#logger.warn({ protocol: this.#protocol, err: result.error?.message }, 'OTLP metrics export failed')
        this.#failing = true
      }
      resultCallback(result)
    })
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush()
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown()
  }
}
