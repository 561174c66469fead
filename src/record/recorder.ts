import type { Logger } from 'pino'
import type { LlmMetrics } from '../metrics/llm/llm-metrics.ts'
import type { OtelMetrics } from '../metrics/otel/otel-metrics.ts'
import type { OtelTraces } from '../metrics/otel/traces.ts'
import { Outcome } from '../timing/measurement.ts'
import type { Measurement } from '../timing/measurement.ts'
import type { Observations, RecordPolicy } from './observations.ts'
import type { ExchangeIdentity } from '../proxy/exchange.ts'
import { writeInfoLine } from '../logger.ts'
import { requestLogLine } from './request-log.ts'

/**
 * Where a finished exchange's Measurement goes: the recording policy turns it into Observations
 * once (record/observations.ts), and the sinks map those: the llm_ metrics, the OpenTelemetry
 * GenAI metrics and spans, the listeners (live views) and the log line.
 */

export type FinishedListener = (o: Observations) => void

export interface RecorderDeps {
  readonly policy: RecordPolicy
  readonly metrics: LlmMetrics
  readonly logger: Logger
  readonly otel?: OtelMetrics
  /** The span export (`otel.traces`): a span for each request the policy kept. */
  readonly traces?: OtelTraces
}

export class Recorder {
  readonly #deps: RecorderDeps
  readonly #listeners: FinishedListener[] = []

  constructor(deps: RecorderDeps) {
    this.#deps = deps
  }

  /** Adds a listener for finished requests (after the metrics). */
  listen(listener: FinishedListener): void {
    this.#listeners.push(listener)
  }

  readonly record = (who: ExchangeIdentity, m: Measurement): void => {
    const deps = this.#deps
    const o = deps.policy.observe(who, m)
    deps.metrics.record(o)
    deps.otel?.record(o)
    if (o.trace !== undefined) deps.traces?.record(who, o)
    for (const listener of this.#listeners) listener(o)
    if (o.parseError !== undefined) {
      deps.logger.warn({ request_id: o.id, route: o.labels.route, provider: o.labels.provider, reason: o.parseError }, 'stream not measured: parser gave up (bytes passed through unchanged)')
    }
    // A failed request's line is a warning (it is what an operator filters for); pino writes it.
    if (o.measurement.outcome === Outcome.error) {
      if (deps.logger.isLevelEnabled('warn')) deps.logger.warn(requestLogLine(who, o), 'request')
    } else if (deps.logger.isLevelEnabled('info')) {
      const line = requestLogLine(who, o)
      if (!writeInfoLine(deps.logger, line, 'request')) deps.logger.info(line, 'request')
    }
  }

  readonly onRecordError = (err: unknown, who: ExchangeIdentity): void => {
    this.#deps.logger.error({ err, route: who.route.label }, 'recording a request failed')
  }
}
