import { realtimeErrorTypeOf } from '../../record/error-type.ts'
import type { TraceStart } from '../../record/trace-context.ts'
import type { FinishedResponse } from '../../realtime/protocol.ts'
import type { SessionIdentity, SessionSummary } from '../../realtime/session.ts'
import { Outcome } from '../../timing/measurement.ts'
import { genAiProvider } from './config.ts'
import { attributeKey } from './protobuf-writer.ts'
import { ERROR, UNSET, describeServer, parentOf } from './request-span.ts'
import type { ServerOf } from './request-span.ts'
import type { SpanOut } from './span-out.ts'

/**
 * What a realtime session's spans say (docs/otel.md, "Traces"): one per response
 * (`realtime_inference {model}`, the GenAI realtime draft) under one for its session
 * (`realtime_session {model}`), told to a SpanOut as a proxied request's span is
 * (request-span.ts), so the main thread writes them as protobuf with no object built for them.
 */

/** What a realtime span needs beyond the session's facts. */
export interface RealtimeSpanContext {
  /** Epoch ms minus the monotonic clock's ms, read once when the span ends. */
  readonly offsetMs: number
  /** The route's upstream, when known (`server.address`, `server.port`). */
  readonly server: ServerOf | undefined
}

const PROVIDER = attributeKey('gen_ai.provider.name')
const OPERATION = attributeKey('gen_ai.operation.name')
const LIVE_SESSION = attributeKey('gen_ai.live_session.id')
const REQUEST_MODEL = attributeKey('gen_ai.request.model')
const RESPONSE_ID = attributeKey('gen_ai.response.id')
const INPUT_TOKENS = attributeKey('gen_ai.usage.input_tokens')
const OUTPUT_TOKENS = attributeKey('gen_ai.usage.output_tokens')
const TEXT_INPUT = attributeKey('gen_ai.usage.text.input_tokens')
const AUDIO_INPUT = attributeKey('gen_ai.usage.audio.input_tokens')
const TEXT_OUTPUT = attributeKey('gen_ai.usage.text.output_tokens')
const AUDIO_OUTPUT = attributeKey('gen_ai.usage.audio.output_tokens')
const STATUS_CODE = attributeKey('http.response.status_code')
const ERROR_TYPE = attributeKey('error.type')
const REQUEST_ID = attributeKey('tokentap.request_id')
const ROUTE = attributeKey('tokentap.route')
const OUTCOME = attributeKey('tokentap.outcome')
const FAULT_DOMAIN = attributeKey('tokentap.error_type')
const PROVIDER_DETAIL = attributeKey('tokentap.provider_detail')
const TTFT = attributeKey('tokentap.ttft')
const TIME_TO_FIRST_AUDIO = attributeKey('tokentap.time_to_first_audio')
const AUDIO_UNDERRUN = attributeKey('tokentap.audio_underrun')
const AUDIO_SECONDS = attributeKey('tokentap.audio_seconds')
const TEXT_DELTAS = attributeKey('tokentap.text_deltas')
const AUDIO_DELTAS = attributeKey('tokentap.audio_deltas')
const RESPONSES = attributeKey('tokentap.responses')
const TENANT = attributeKey('tokentap.tenant')
const FAILURE_CODE = attributeKey('tokentap.failure_code')
const CLOSE_CODE = attributeKey('tokentap.close_code')
const ENDED_BY = attributeKey('tokentap.ended_by')

/** Tells a realtime response's span, under its session's (`start`: the session's ids) with its own `spanId`. */
export function describeRealtimeResponse(
  who: SessionIdentity,
  start: TraceStart,
  spanId: string,
  r: FinishedResponse,
  c: RealtimeSpanContext,
  out: SpanOut,
): void {
  const offset = c.offsetMs
  const failed = r.outcome === Outcome.error
  const began = r.start ?? r.end
  const end = r.end + offset
  out.begin({
    name: `realtime_inference ${who.model ?? 'unknown'}`,
    traceId: start.traceId,
    spanId,
    // Under its session's span (tokentap's own, local to this process).
    parent: { traceId: start.traceId, spanId: start.spanId, sampled: true, traceState: undefined, remote: false },
    startMs: began + offset,
    endMs: end,
    durationMs: r.end - began,
  })
  out.string(OPERATION, 'realtime_inference')
  out.string(PROVIDER, genAiProvider(who.provider))
  out.string(LIVE_SESSION, who.id)
  out.string(REQUEST_ID, who.id)
  out.string(ROUTE, who.route.label)
  out.string(OUTCOME, r.outcome)
  if (who.model !== undefined) out.string(REQUEST_MODEL, who.model)
  if (r.id !== undefined) out.string(RESPONSE_ID, r.id)
  const u = r.usage
  if (u !== undefined) {
    out.number(INPUT_TOKENS, u.inputText + u.inputAudio)
    out.number(OUTPUT_TOKENS, u.outputText + u.outputAudio)
    out.number(TEXT_INPUT, u.inputText)
    out.number(AUDIO_INPUT, u.inputAudio)
    out.number(TEXT_OUTPUT, u.outputText)
    out.number(AUDIO_OUTPUT, u.outputAudio)
  }
  if (failed) out.string(ERROR_TYPE, r.detail ?? 'provider_error')
  const errorClass = realtimeErrorTypeOf(r.outcome, r.detail, r.failure)
  if (errorClass !== 'none') out.string(FAULT_DOMAIN, errorClass)
  if (r.detail !== undefined) out.string(PROVIDER_DETAIL, r.detail)
  const timing = r.timing
  if (timing.ttft !== undefined) out.number(TTFT, timing.ttft)
  if (timing.ttfa !== undefined) out.number(TIME_TO_FIRST_AUDIO, timing.ttfa)
  if (timing.underrun !== undefined) out.number(AUDIO_UNDERRUN, timing.underrun)
  out.number(AUDIO_SECONDS, timing.audioSeconds)
  out.number(TEXT_DELTAS, timing.textDeltas)
  out.number(AUDIO_DELTAS, timing.audioDeltas)
  describeServer(c.server, out)
  if (timing.ttft !== undefined) out.event('tokentap.first_token', began + timing.ttft * 1000 + offset)
  out.event('tokentap.end', end)
  out.string(OUTCOME, r.outcome)
  out.end(failed ? ERROR : UNSET, failed ? r.detail : undefined)
}

/** Tells a realtime session's span: tokentap's own ids (`start`), the child of the caller's span when it sent one. */
export function describeRealtimeSession(
  who: SessionIdentity,
  start: TraceStart,
  summary: SessionSummary,
  c: RealtimeSpanContext,
  out: SpanOut,
): void {
  const offset = c.offsetMs
  const failed = summary.outcome === Outcome.error
  const end = who.tReq + summary.duration * 1000
  out.begin({
    name: `realtime_session ${who.model ?? 'unknown'}`,
    traceId: start.traceId,
    spanId: start.spanId,
    parent: parentOf(start),
    startMs: who.tReq + offset,
    endMs: end + offset,
    durationMs: end - who.tReq,
  })
  out.string(PROVIDER, genAiProvider(who.provider))
  out.string(LIVE_SESSION, who.id)
  out.number(STATUS_CODE, summary.statusCode)
  out.string(REQUEST_ID, who.id)
  out.string(ROUTE, who.route.label)
  out.string(OUTCOME, summary.outcome)
  out.number(RESPONSES, summary.responses)
  if (who.model !== undefined) out.string(REQUEST_MODEL, who.model)
  if (who.tenant !== undefined) out.string(TENANT, who.tenant)
  if (summary.failure !== undefined) out.string(FAILURE_CODE, summary.failure)
  const closeCode = summary.close?.code
  if (closeCode !== undefined) out.number(CLOSE_CODE, closeCode)
  if (summary.endedBy !== undefined) out.string(ENDED_BY, summary.endedBy)
  const errorType = failed
    ? (summary.failure ?? (closeCode !== undefined ? String(closeCode) : String(summary.statusCode)))
    : undefined
  if (errorType !== undefined) out.string(ERROR_TYPE, errorType)
  describeServer(c.server, out)
  out.end(failed ? ERROR : UNSET, errorType)
}
