import type { Logger } from 'pino'
import type { Observations } from './observations.ts'
import { writeInfoLine } from '../logger.ts'
import { Outcome } from '../timing/measurement.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import { costFields } from '../cost/cost.ts'

/**
 * The one log line per request: the request's own figures in milliseconds and its own model (not the folded label),
 * so a request counted under `model="other"` can still be found. No headers, text or query.
 */

/** Paths and model names are cut to this many characters in the log line. */
const MAX_PATH = 256
const MAX_MODEL = 256

const ms = (seconds: number | undefined): number | undefined =>
  seconds === undefined ? undefined : Math.round(seconds * 1e6) / 1e3
/** Where a request's time went, for the log line (absent figures left out) and `/debug/requests/{id}` (null). */
export function timeSpentFields<T>(
  reported: ReportedTimes | undefined,
  outsideUpstream: number | undefined,
  clientWriteWait: number | undefined,
  ms: (seconds: number | undefined) => T,
) {
  return {
    upstream_queue_ms: ms(reported?.queue),
    upstream_load_ms: ms(reported?.load),
    upstream_prompt_ms: ms(reported?.prompt),
    upstream_generation_ms: ms(reported?.generation),
    upstream_total_ms: ms(reported?.total),
    ttft_outside_upstream_ms: ms(outsideUpstream),
    client_write_wait_ms: ms(clientWriteWait),
  }
}

const cut = (s: string, n: number): string => (s.length > n ? `${s.slice(0, n)}…` : s)

export function requestLogLine(o: Observations): Record<string, unknown> {
  const who = o.who
  const own = o.measured
  const labels = o.labels
  const reported = o.upstreamReported
  const line: Record<string, unknown> = {
    request_id: who.id,
    route: labels.route,
    provider: labels.provider,
    tenant: labels.tenant,
    model: who.model === undefined ? labels.model : cut(who.model, MAX_MODEL),
    model_label: who.model !== undefined && labels.model !== who.model ? labels.model : undefined,
    method: who.method,
    path: cut(who.path, MAX_PATH),
    status: o.statusCode,
    outcome: o.outcome,
    error: own.failure ?? own.providerError,
    // Who is to blame, by the error-type table (error-type.ts); absent on an ok request (its class is `none`).
    error_type: o.outcome === 'ok' ? undefined : o.errorClass,
    error_detail: who.failureDetail,
    ttft_ms: ms(o.ttft),
    headers_ms: ms(o.headers),
    e2e_ms: ms(o.e2e),
    output_tokens: own.outputTokens,
    output_source: o.outputSource,
    input_tokens: o.inputTokens,
    chunks: own.chunks,
    streamed_tokens: own.streamedTokens,
    tpot_ms: ms(own.tpot),
    itl_p50_ms: ms(own.itlP50),
    itl_p99_ms: ms(own.itlP99),
    max_gap_ms: ms(o.maxGap),
    stalls: o.stalls,
    tps: own.tps === undefined ? undefined : Math.round(own.tps * 100) / 100,
    // timeSpentFields' keys, written out: a spread here makes V8 define every key after it through
    // its runtime, and whether it does moved a request's cost by ≈ 7,000 instructions from one
    // process to the next (docs/performance.md, "Spans"). A test pins them to timeSpentFields'.
    upstream_queue_ms: ms(reported?.queue),
    upstream_load_ms: ms(reported?.load),
    upstream_prompt_ms: ms(reported?.prompt),
    upstream_generation_ms: ms(reported?.generation),
    upstream_total_ms: ms(reported?.total),
    ttft_outside_upstream_ms: ms(o.outsideUpstream),
    client_write_wait_ms: ms(o.clientWriteWait),
    cost: o.cost === undefined ? undefined : costFields(o.cost),
    bytes_in: who.bytesIn,
    bytes_out: who.bytesOut,
    // The exported span of a kept request (`otel.traces`): from a log line to its trace.
    trace_id: o.trace?.traceId,
    span_id: o.trace?.spanId,
  }
  // A parser's extras (rare) after the fixed keys, as the spread at the end of the literal put them.
  return who.extra === undefined ? line : Object.assign(line, who.extra)
}

/** Writes a request's or session's line only when its level is on; a failed one is a warning, what operators filter for. */
export function writeRecordLine<T>(
  logger: Logger,
  failed: boolean,
  msg: string,
  line: (of: T) => Record<string, unknown>,
  of: T,
): void {
  if (failed) {
    if (logger.isLevelEnabled('warn')) logger.warn(line(of), msg)
  } else if (logger.isLevelEnabled('info')) {
    const fields = line(of)
    if (!writeInfoLine(logger, fields, msg)) logger.info(fields, msg)
  }
}

/** The log sink of finished requests: the parser's give-up warning, then the request's line. */
export function requestLog(logger: Logger): (o: Observations) => void {
  return (o) => {
    if (o.parseError !== undefined) {
      logger.warn(
        { request_id: o.who.id, route: o.labels.route, provider: o.labels.provider, reason: o.parseError },
        'stream not measured: parser gave up (bytes passed through unchanged)',
      )
    }
    writeRecordLine(logger, o.outcome === Outcome.error, 'request', requestLogLine, o)
  }
}
