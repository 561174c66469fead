import type { Logger } from 'pino'
import type { LabelLimiter } from '../metrics/label-limiter.ts'
import type { Labels, LlmMetrics } from '../metrics/llm-metrics.ts'
import type { OtelMetrics } from '../metrics/otel.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { ExchangeIdentity } from './exchange.ts'
import { writeInfoLine } from '../logger.ts'
import { requestLogLine } from './request-log.ts'

/**
 * Where a finished exchange's Measurement goes: the llm_ metrics, the OpenTelemetry GenAI
 * metrics, the log line, and any listeners (live views). Each only maps the Measurement; the
 * labels' cardinality bound (`limits.max_models_per_route`) is applied here, once.
 */

export type FinishedListener = (who: ExchangeIdentity, labels: Labels, m: Measurement) => void

export interface RecorderDeps {
  readonly metrics: LlmMetrics
  readonly models: LabelLimiter
  readonly logger: Logger
  readonly otel?: OtelMetrics
  /** Called for every finished request after the metrics (live page, recent requests). */
  readonly listeners?: readonly FinishedListener[]
}

export class Recorder {
  readonly #deps: RecorderDeps
  readonly #listeners: FinishedListener[]

  constructor(deps: RecorderDeps) {
    this.#deps = deps
    this.#listeners = [...(deps.listeners ?? [])]
  }

  /** Adds a listener for finished requests. */
  listen(listener: FinishedListener): void {
    this.#listeners.push(listener)
  }

  /** The labels a request is counted under (the model folded into `other` past the route's bound). */
  labelsOf(who: Pick<ExchangeIdentity, 'provider' | 'route' | 'model'>): Labels {
    return { provider: who.provider, model: this.#deps.models.value(who.route.label, who.model), route: who.route.label }
  }

  readonly record = (who: ExchangeIdentity, m: Measurement): void => {
    const deps = this.#deps
    const labels = this.labelsOf(who)
    deps.metrics.record(labels, m, { id: who.id, concurrency: who.concurrency, overhead: who.overhead, usageInjected: who.usageInjected, hasSlo: who.route.slo !== undefined })
    deps.otel?.record(labels, m, {
      method: who.method,
      path: who.path,
      responseModel: who.responseModel === undefined ? undefined : deps.models.value(`${who.route.label}\u0000response`, who.responseModel),
    })
    for (const listener of this.#listeners) listener(who, labels, m)
    if (m.parseError !== undefined) {
      deps.logger.warn({ request_id: who.id, route: labels.route, provider: labels.provider, reason: m.parseError }, 'stream not measured: parser gave up (bytes passed through unchanged)')
    }
    if (deps.logger.isLevelEnabled('info')) {
      const line = requestLogLine(who, labels, m)
      if (!writeInfoLine(deps.logger, line, 'request')) deps.logger.info(line, 'request')
    }
  }

  readonly onRecordError = (err: unknown, who: ExchangeIdentity): void => {
    this.#deps.logger.error({ err, route: who.route.label }, 'recording a request failed')
  }
}
