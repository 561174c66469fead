import type { SpanStatusCode } from '@opentelemetry/api'
import type { Observations } from '../../record/observations.ts'
import type { CallerSpan, TraceStart } from '../../record/trace-context.ts'
import { Outcome } from '../../timing/measurement.ts'
import { genAiProvider } from './config.ts'
import { attributeKey } from './protobuf-writer.ts'
import type { AttributeKey } from './protobuf-writer.ts'
import type { ParentRecord } from './span-export.ts'
import type { SpanOut } from './span-out.ts'

/**
 * What a proxied request's span says, by the OpenTelemetry GenAI conventions for inference client
 * spans (docs/otel.md, "Traces"): told to a SpanOut from the request's Observations, so the main
 * thread writes it as protobuf with no object built for it (span-record-protobuf.ts), and the same
 * description gives the SDK's record where one is needed (span-out.ts).
 */

/** A stall event per gap longer than `metrics.stall_seconds`, up to this many (the rest are counted in `tokentap.stalls`). */
export const MAX_STALL_EVENTS = 100

/**
 * `SpanStatusCode`'s values, typed by @opentelemetry/api: the proxy's thread never loads the API
 * or the SDK (≈ 180 ms of CPU at start, docs/performance.md "Spans"), the export's thread does.
 */
export const UNSET = 0 as SpanStatusCode.UNSET
export const ERROR = 2 as SpanStatusCode.ERROR

export interface ServerOf {
  readonly address: string
  readonly port: number
}

/** What a request's span needs beyond its Observations. */
export interface RequestSpanContext {
  /** Epoch ms minus the monotonic clock's ms, read once at the request's end. */
  readonly offsetMs: number
  /** `metrics.stall_seconds` in ms: a longer gap between content chunks gets a stall event. */
  readonly stallMs: number
  /** The route's upstream, when known (`server.address`, `server.port`). */
  readonly server: ServerOf | undefined
}

const S = 1 / 1000

// The span's keys, each encoded once (protobuf-writer.ts).
const PROVIDER = attributeKey('gen_ai.provider.name')
const METHOD = attributeKey('http.request.method')
const STATUS_CODE = attributeKey('http.response.status_code')
const REQUEST_ID = attributeKey('tokentap.request_id')
const ROUTE = attributeKey('tokentap.route')
const OUTCOME = attributeKey('tokentap.outcome')
const E2E = attributeKey('tokentap.e2e')
const OPERATION = attributeKey('gen_ai.operation.name')
const REQUEST_MODEL = attributeKey('gen_ai.request.model')
const RESPONSE_MODEL = attributeKey('gen_ai.response.model')
const STREAM = attributeKey('gen_ai.request.stream')
const TIME_TO_FIRST_CHUNK = attributeKey('gen_ai.response.time_to_first_chunk')
const INPUT_TOKENS = attributeKey('gen_ai.usage.input_tokens')
const OUTPUT_TOKENS = attributeKey('gen_ai.usage.output_tokens')
const OUTPUT_SOURCE = attributeKey('tokentap.output_tokens.source')
const CACHE_READ = attributeKey('gen_ai.usage.cache_read.input_tokens')
const CACHE_WRITE = attributeKey('gen_ai.usage.cache_creation.input_tokens')
const REASONING = attributeKey('gen_ai.usage.reasoning.output_tokens')
const ERROR_TYPE = attributeKey('error.type')
const FAULT_DOMAIN = attributeKey('tokentap.error_type')
const FAILURE_CODE = attributeKey('tokentap.failure_code')
const PROVIDER_ERROR = attributeKey('tokentap.provider_error')
const SERVER_ADDRESS = attributeKey('server.address')
const SERVER_PORT = attributeKey('server.port')
const TENANT = attributeKey('tokentap.tenant')
const TTFT = attributeKey('tokentap.ttft')
const TPOT = attributeKey('tokentap.tpot')
const ITL_P50 = attributeKey('tokentap.itl.p50')
const ITL_P99 = attributeKey('tokentap.itl.p99')
const MAX_GAP = attributeKey('tokentap.max_gap')
const STALLS = attributeKey('tokentap.stalls')
const CHUNKS = attributeKey('tokentap.chunks')
const TIME_TO_HEADERS = attributeKey('tokentap.time_to_response_headers')
const CLIENT_WRITE_WAIT = attributeKey('tokentap.client_write_wait')
const SLO = attributeKey('tokentap.slo')
const TOKENS = attributeKey('tokentap.tokens')
const GAP = attributeKey('tokentap.gap')
const CHUNK = attributeKey('tokentap.chunk')

/** `tokentap.upstream_reported.{phase}`, by phase (the parsers' few phase names). */
const reportedKeys = new Map<string, AttributeKey>()
function reportedKey(phase: string): AttributeKey {
  let key = reportedKeys.get(phase)
  if (key === undefined) {
    key = attributeKey(`tokentap.upstream_reported.${phase}`)
    reportedKeys.set(phase, key)
  }
  return key
}

/** `server.address` and `server.port` of a span, when its route's upstream is known. */
export function describeServer(server: ServerOf | undefined, out: SpanOut): void {
  if (server === undefined) return
  out.string(SERVER_ADDRESS, server.address)
  out.number(SERVER_PORT, server.port)
}

/** The caller's span (from its traceparent), the parent of tokentap's; undefined when there was none. */
export function parentOf(start: TraceStart): ParentRecord | undefined {
  const parent: CallerSpan | undefined = start.parent
  if (parent === undefined) return undefined
  return {
    traceId: parent.traceId,
    spanId: parent.spanId,
    sampled: parent.sampled,
    traceState: parent.traceState,
    remote: true,
  }
}

/** Tells a kept request's span (`o.trace` set) to `out`. */
export function describeRequestSpan(o: Observations, start: TraceStart, c: RequestSpanContext, out: SpanOut): void {
  const who = o.who
  const m = o.measured
  const offset = c.offsetMs
  const operation = o.operation
  const end = o.endedAt + offset
  out.begin({
    name: operation === undefined ? who.method : `${operation} ${who.model ?? 'unknown'}`,
    traceId: start.traceId,
    spanId: start.spanId,
    parent: parentOf(start),
    startMs: who.tReq + offset,
    endMs: end,
    durationMs: o.endedAt - who.tReq,
  })
  out.string(PROVIDER, genAiProvider(o.labels.provider))
  out.string(METHOD, who.method)
  out.number(STATUS_CODE, o.statusCode)
  out.string(REQUEST_ID, who.id)
  out.string(ROUTE, who.route.label)
  out.string(OUTCOME, o.outcome)
  out.number(E2E, o.e2e)
  if (operation !== undefined) out.string(OPERATION, operation)
  if (who.model !== undefined) out.string(REQUEST_MODEL, who.model)
  if (who.responseModel !== undefined) out.string(RESPONSE_MODEL, who.responseModel)
  const chunks = m.marks
  if (chunks.count > 0) out.boolean(STREAM, true)
  if (o.ttft !== undefined) out.number(TIME_TO_FIRST_CHUNK, o.ttft)
  if (o.inputTokens !== undefined) out.number(INPUT_TOKENS, o.inputTokens)
  if (o.outputTokens !== undefined) {
    out.number(OUTPUT_TOKENS, o.outputTokens)
    out.string(OUTPUT_SOURCE, o.outputSource)
  }
  if (o.cacheReadTokens !== undefined) out.number(CACHE_READ, o.cacheReadTokens)
  if (o.cacheWriteTokens !== undefined) out.number(CACHE_WRITE, o.cacheWriteTokens)
  if (o.reasoningTokens !== undefined) out.number(REASONING, o.reasoningTokens)
  if (o.errorType !== undefined) out.string(ERROR_TYPE, o.errorType)
  // The fault domain (record/error-type.ts), as on llm_requests_total's error_type.
  if (o.errorClass !== 'none') out.string(FAULT_DOMAIN, o.errorClass)
  if (m.failure !== undefined) out.string(FAILURE_CODE, m.failure)
  if (m.providerError !== undefined) out.string(PROVIDER_ERROR, m.providerError)
  describeServer(c.server, out)
  if (who.tenant !== undefined) out.string(TENANT, who.tenant)
  if (o.ttft !== undefined) out.number(TTFT, o.ttft)
  if (o.tpot !== undefined) out.number(TPOT, o.tpot)
  if (m.itlP50 !== undefined) out.number(ITL_P50, m.itlP50)
  if (m.itlP99 !== undefined) out.number(ITL_P99, m.itlP99)
  if (o.maxGap !== undefined) out.number(MAX_GAP, o.maxGap)
  out.number(STALLS, o.stalls)
  out.number(CHUNKS, m.chunks)
  if (o.headers !== undefined) out.number(TIME_TO_HEADERS, o.headers)
  if (o.clientWriteWait !== undefined) out.number(CLIENT_WRITE_WAIT, o.clientWriteWait)
  const reported = o.upstreamReported
  if (reported !== undefined)
    for (const phase in reported) {
      const seconds = reported[phase as keyof typeof reported]
      if (seconds !== undefined) out.number(reportedKey(phase), seconds)
    }
  if (o.slo !== undefined) out.string(SLO, o.slo)

  if (chunks.count > 0) {
    out.event('tokentap.first_token', chunks.at(0) + offset)
    out.number(TOKENS, chunks.tokens(0))
  }
  const limitMs = c.stallMs
  for (let i = 1, stalls = 0; i < chunks.count && stalls < MAX_STALL_EVENTS; i++) {
    const gap = chunks.at(i) - chunks.at(i - 1)
    if (gap > limitMs) {
      // At the chunk that ended the stall, with its length: the wait is the span of time before it.
      out.event('tokentap.stall', chunks.at(i) + offset)
      out.number(GAP, gap * S)
      out.number(CHUNK, i)
      stalls++
    }
  }
  out.event('tokentap.end', end)
  out.string(OUTCOME, o.outcome)
  const failed = o.outcome === Outcome.error
  out.end(failed ? ERROR : UNSET, failed ? o.errorType : undefined)
}
