import type { Observations } from './observations.ts'
import type { ExchangeIdentity } from '../proxy/exchange.ts'
import type { ReportedTimes } from '../parsers/reported-times.ts'
import { costFields } from '../cost/cost.ts'

/**
 * The one log line per request (`msg: "request"`): a map of its Observations (the request's own
 * figures as measured, not gated like the aggregates) and identity, in milliseconds. Carries the request's own model (length-bounded), not the folded label, so a
 * request counted under `model="other"` can still be found. No headers, no text, no query.
 */

/** Paths and model names are cut to this many characters in the log line. */
const MAX_PATH = 256
const MAX_MODEL = 256

const ms = (seconds: number | undefined): number | undefined => (seconds === undefined ? undefined : Math.round(seconds * 1e6) / 1e3)
/**
 * Where a request's time went, as the log line and `/debug/requests/{id}` both name it: the
 * upstream's own phases, the first token's wait outside them, the wait for the client's socket.
 * `ms` writes an absent figure as that output wants it (the log line leaves it out, the JSON null).
 */
export function timeSpentFields<T>(reported: ReportedTimes | undefined, outsideUpstream: number | undefined, clientWriteWait: number | undefined, ms: (seconds: number | undefined) => T) {
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

export function requestLogLine(who: ExchangeIdentity, o: Observations): Record<string, unknown> {
  const m = o.measurement
  const t = m.timing
  const labels = o.labels
  return {
    request_id: o.id,
    route: labels.route,
    provider: labels.provider,
    tenant: labels.tenant,
    model: who.model === undefined ? labels.model : cut(who.model, MAX_MODEL),
    model_label: who.model !== undefined && labels.model !== who.model ? labels.model : undefined,
    method: who.method,
    path: cut(who.path, MAX_PATH),
    status: m.statusCode,
    outcome: m.outcome,
    error: m.failure ?? m.providerError,
    // Who is to blame, by the upstream-error table; absent on an ok request (its class is `none`).
    error_type: o.outcome === 'ok' ? undefined : o.errorClass,
    error_detail: who.failureDetail,
    ttft_ms: ms(t.ttft),
    headers_ms: ms(m.headersSeconds),
    e2e_ms: ms(t.e2e),
    output_tokens: m.outputTokens,
    output_source: m.outputSource,
    input_tokens: m.inputTokens,
    chunks: t.chunks,
    streamed_tokens: t.tokens,
    tpot_ms: ms(t.tpot),
    itl_p50_ms: ms(m.itlP50),
    itl_p99_ms: ms(m.itlP99),
    max_gap_ms: ms(t.maxGap),
    stalls: m.stalls,
    tps: t.tps === undefined ? undefined : Math.round(t.tps * 100) / 100,
    ...timeSpentFields(m.reported, m.outsideUpstream, m.clientWriteWait, ms),
    cost: o.cost === undefined ? undefined : costFields(o.cost),
    bytes_in: who.bytesIn,
    bytes_out: who.bytesOut,
    // The exported span of a kept request (`otel.traces`): from a log line to its trace.
    trace_id: o.trace?.traceId,
    span_id: o.trace?.spanId,
    ...who.extra,
  }
}
