import type { Attributes, SpanStatusCode } from '@opentelemetry/api'
import type { SpanExporter } from '@opentelemetry/sdk-trace-base'
import type { Logger } from 'pino'
import type { OtelConfig, TracesConfig } from '../../config/schema.ts'
import { TraceIdSource } from '../../record/trace-context.ts'
import { realtimeErrorTypeOf } from '../../record/error-type.ts'
import type { TraceStart } from '../../record/trace-context.ts'
import type { FinishedResponse } from '../../realtime/protocol.ts'
import type { RealtimeListener } from '../../realtime/realtime.ts'
import type { SessionIdentity, SessionSummary } from '../../realtime/session.ts'
import { Outcome } from '../../timing/measurement.ts'
import type { Observations } from '../../record/observations.ts'
import { sampledAtStart } from '../../timing/trace-sampling.ts'
import type { EventRecord, ParentRecord, SpanRecord } from './span-export.ts'
import { TraceThread } from './trace-thread.ts'
import { genAiProvider, tracesEndpoint } from './config.ts'

/**
 * A span per proxied request, by the OpenTelemetry GenAI conventions for inference client spans
 * (docs/otel.md, "Traces"), built when the request has ended so nothing runs on the byte path.
 * This thread only gathers a kept request's figures into a plain record; the SDK's spans, the
 * batch processor and the OTLP exporter run in a worker thread of their own (trace-thread.ts), or
 * here when an exporter object is injected.
 */

/** A stall event per gap longer than `metrics.stall_seconds`, up to this many (the rest are counted in `tokentap.stalls`). */
const MAX_STALL_EVENTS = 100

export interface ServerOf {
  readonly address: string
  readonly port: number
}

export interface OtelTracesOptions {
  /** The `otel` section: the headers and timeout shared with the metrics export. */
  readonly config: OtelConfig
  /** `otel.traces`: its endpoint, and the sampling of realtime sessions (HTTP requests come sampled by the recording policy). */
  readonly traces: TracesConfig
  readonly logger: Logger
  /** `metrics.stall_seconds`: a longer gap between content chunks gets a stall event. */
  readonly stallSeconds: number
  /** The monotonic clock (ms) the requests' times come from. */
  readonly now: () => number
  /** Epoch ms, read with `now` at each request's end to place its monotonic times (default Date.now). */
  readonly wallMs?: () => number
  /** The upstream a route's requests go to, when known. */
  readonly serverOf?: (route: string) => ServerOf | undefined
  /** Replaces the OTLP exporter (tests, benchmarks). */
  readonly exporter?: SpanExporter
}

const S = 1 / 1000
/**
 * `SpanStatusCode`'s values, typed by @opentelemetry/api: this thread never loads the API or the
 * SDK (≈ 180 ms of CPU at start, docs/performance.md "Spans"), the export's thread does.
 */
const UNSET = 0 as SpanStatusCode.UNSET
const ERROR = 2 as SpanStatusCode.ERROR

export class OtelTraces {
  readonly #export: SpanSink
  readonly #options: OtelTracesOptions
  readonly #wallMs: () => number
  /** Span ids of realtime responses (made when they end: nothing is sent upstream with them). */
  readonly #responseIds = new TraceIdSource()
  /** Open realtime sessions (by `seq`) with a response exported: their session span is exported too. */
  readonly #sessionsWithSpans = new Set<number>()

  constructor(options: OtelTracesOptions) {
    this.#options = options
    this.#wallMs = options.wallMs ?? Date.now
    const { config, logger } = options
    this.#export =
      options.exporter === undefined
        ? new TraceThread(
            {
              url: tracesEndpoint(config),
              headers: Object.keys(config.headers).length === 0 ? undefined : { ...config.headers },
              timeoutMillis: config.timeout_ms,
            },
            logger,
          )
        : inProcess(options.exporter, logger)
  }

  /** Builds and ends the span of one finished request the recording policy kept (`o.trace` set). */
  record(o: Observations): void {
    const who = o.who
    const start = who.trace
    if (o.trace === undefined || start === undefined) return
    // Monotonic ms → epoch: one reading of both clocks per request, at its end (as the metrics' timestamps are read when recorded).
    const offset = this.#wallMs() - this.#options.now()
    const m = o.measured
    const operation = o.operation
    const model = who.model ?? 'unknown'
    const attributes: Attributes = {
      'gen_ai.provider.name': genAiProvider(o.labels.provider),
      'http.request.method': who.method,
      'http.response.status_code': o.statusCode,
      'tokentap.request_id': who.id,
      'tokentap.route': who.route.label,
      'tokentap.outcome': o.outcome,
      'tokentap.e2e': o.e2e,
    }
    if (operation !== undefined) attributes['gen_ai.operation.name'] = operation
    if (who.model !== undefined) attributes['gen_ai.request.model'] = who.model
    if (who.responseModel !== undefined) attributes['gen_ai.response.model'] = who.responseModel
    if (m.marks.count > 0) attributes['gen_ai.request.stream'] = true
    if (o.ttft !== undefined) attributes['gen_ai.response.time_to_first_chunk'] = o.ttft
    if (o.inputTokens !== undefined) attributes['gen_ai.usage.input_tokens'] = o.inputTokens
    if (o.outputTokens !== undefined) {
      attributes['gen_ai.usage.output_tokens'] = o.outputTokens
      attributes['tokentap.output_tokens.source'] = o.outputSource
    }
    if (o.cacheReadTokens !== undefined) attributes['gen_ai.usage.cache_read.input_tokens'] = o.cacheReadTokens
    if (o.cacheWriteTokens !== undefined) attributes['gen_ai.usage.cache_creation.input_tokens'] = o.cacheWriteTokens
    if (o.reasoningTokens !== undefined) attributes['gen_ai.usage.reasoning.output_tokens'] = o.reasoningTokens
    if (o.errorType !== undefined) attributes['error.type'] = o.errorType
    // The fault domain (record/error-type.ts), as on llm_requests_total's error_type.
    if (o.errorClass !== 'none') attributes['tokentap.error_type'] = o.errorClass
    if (m.failure !== undefined) attributes['tokentap.failure_code'] = m.failure
    if (m.providerError !== undefined) attributes['tokentap.provider_error'] = m.providerError
    this.#server(who.route.label, attributes)
    if (who.tenant !== undefined) attributes['tokentap.tenant'] = who.tenant
    if (o.ttft !== undefined) attributes['tokentap.ttft'] = o.ttft
    if (o.tpot !== undefined) attributes['tokentap.tpot'] = o.tpot
    if (m.itlP50 !== undefined) attributes['tokentap.itl.p50'] = m.itlP50
    if (m.itlP99 !== undefined) attributes['tokentap.itl.p99'] = m.itlP99
    if (o.maxGap !== undefined) attributes['tokentap.max_gap'] = o.maxGap
    attributes['tokentap.stalls'] = o.stalls
    attributes['tokentap.chunks'] = m.chunks
    if (o.headers !== undefined) attributes['tokentap.time_to_response_headers'] = o.headers
    if (o.clientWriteWait !== undefined) attributes['tokentap.client_write_wait'] = o.clientWriteWait
    const reported = o.upstreamReported
    if (reported !== undefined)
      for (const [phase, seconds] of Object.entries(reported))
        if (seconds !== undefined) attributes[`tokentap.upstream_reported.${phase}`] = seconds
    if (o.slo !== undefined) attributes['tokentap.slo'] = o.slo

    const name = operation === undefined ? who.method : `${operation} ${model}`
    const chunks = m.marks
    const events: EventRecord[] = []
    if (chunks.count > 0)
      events.push({
        name: 'tokentap.first_token',
        attributes: { 'tokentap.tokens': chunks.tokens(0) },
        timeMs: chunks.at(0) + offset,
      })
    const limitMs = this.#options.stallSeconds * 1000
    for (let i = 1, stalls = 0; i < chunks.count && stalls < MAX_STALL_EVENTS; i++) {
      const gap = chunks.at(i) - chunks.at(i - 1)
      if (gap > limitMs) {
        // At the chunk that ended the stall, with its length: the wait is the span of time before it.
        events.push({
          name: 'tokentap.stall',
          attributes: { 'tokentap.gap': gap * S, 'tokentap.chunk': i },
          timeMs: chunks.at(i) + offset,
        })
        stalls++
      }
    }
    const end = o.endedAt + offset
    events.push({ name: 'tokentap.end', attributes: { 'tokentap.outcome': o.outcome }, timeMs: end })
    const failed = o.outcome === Outcome.error
    this.#export.add({
      name,
      traceId: start.traceId,
      spanId: start.spanId,
      parent: parentOf(start),
      startMs: who.tReq + offset,
      endMs: end,
      durationMs: o.endedAt - who.tReq,
      attributes,
      events,
      status: failed ? ERROR : UNSET,
      statusMessage: failed ? o.errorType : undefined,
    })
  }

  /**
   * Realtime sessions: a span per response (`realtime_inference {model}`, the GenAI realtime draft)
   * under its session's span; a session's span is exported whenever one of its responses is (no orphans).
   */
  readonly realtime: RealtimeListener = {
    response: (who, _labels, r) => this.#response(who, r),
    session: (who, _labels, summary) => this.#session(who, summary),
  }

  #keepsErrors(): boolean {
    return this.#options.traces.sample.keep.includes('error')
  }

  #response(who: SessionIdentity, r: FinishedResponse): void {
    const start = who.trace
    if (start === undefined) return
    const failed = r.outcome === Outcome.error
    if (!sampledAtStart(start, this.#options.traces.sample.ratio) && !(failed && this.#keepsErrors())) return
    this.#sessionsWithSpans.add(who.seq)
    const offset = this.#wallMs() - this.#options.now()
    const began = r.start ?? r.end
    const attributes: Attributes = {
      'gen_ai.operation.name': 'realtime_inference',
      'gen_ai.provider.name': genAiProvider(who.provider),
      'gen_ai.live_session.id': who.id,
      'tokentap.request_id': who.id,
      'tokentap.route': who.route.label,
      'tokentap.outcome': r.outcome,
    }
    if (who.model !== undefined) attributes['gen_ai.request.model'] = who.model
    if (r.id !== undefined) attributes['gen_ai.response.id'] = r.id
    const u = r.usage
    if (u !== undefined) {
      attributes['gen_ai.usage.input_tokens'] = u.inputText + u.inputAudio
      attributes['gen_ai.usage.output_tokens'] = u.outputText + u.outputAudio
      attributes['gen_ai.usage.text.input_tokens'] = u.inputText
      attributes['gen_ai.usage.audio.input_tokens'] = u.inputAudio
      attributes['gen_ai.usage.text.output_tokens'] = u.outputText
      attributes['gen_ai.usage.audio.output_tokens'] = u.outputAudio
    }
    if (failed) attributes['error.type'] = r.detail ?? 'provider_error'
    const errorClass = realtimeErrorTypeOf(r.outcome, r.detail, r.failure)
    if (errorClass !== 'none') attributes['tokentap.error_type'] = errorClass
    if (r.detail !== undefined) attributes['tokentap.provider_detail'] = r.detail
    const timing = r.timing
    if (timing.ttft !== undefined) attributes['tokentap.ttft'] = timing.ttft
    if (timing.ttfa !== undefined) attributes['tokentap.time_to_first_audio'] = timing.ttfa
    if (timing.underrun !== undefined) attributes['tokentap.audio_underrun'] = timing.underrun
    attributes['tokentap.audio_seconds'] = timing.audioSeconds
    attributes['tokentap.text_deltas'] = timing.textDeltas
    attributes['tokentap.audio_deltas'] = timing.audioDeltas
    this.#server(who.route.label, attributes)
    // Under its session's span (tokentap's own, local to this process).
    const session: ParentRecord = {
      traceId: start.traceId,
      spanId: start.spanId,
      sampled: true,
      traceState: undefined,
      remote: false,
    }
    const events: EventRecord[] = []
    if (timing.ttft !== undefined)
      events.push({ name: 'tokentap.first_token', timeMs: began + timing.ttft * 1000 + offset })
    const end = r.end + offset
    events.push({ name: 'tokentap.end', attributes: { 'tokentap.outcome': r.outcome }, timeMs: end })
    this.#export.add({
      name: `realtime_inference ${who.model ?? 'unknown'}`,
      traceId: start.traceId,
      spanId: this.#responseIds.spanId(),
      parent: session,
      startMs: began + offset,
      endMs: end,
      durationMs: r.end - began,
      attributes,
      events,
      status: failed ? ERROR : UNSET,
      statusMessage: failed ? r.detail : undefined,
    })
  }

  #session(who: SessionIdentity, summary: SessionSummary): void {
    const start = who.trace
    if (start === undefined) return
    const failed = summary.outcome === Outcome.error
    const withSpans = this.#sessionsWithSpans.delete(who.seq)
    if (!withSpans && !sampledAtStart(start, this.#options.traces.sample.ratio) && !(failed && this.#keepsErrors()))
      return
    const offset = this.#wallMs() - this.#options.now()
    const attributes: Attributes = {
      'gen_ai.provider.name': genAiProvider(who.provider),
      'gen_ai.live_session.id': who.id,
      'http.response.status_code': summary.statusCode,
      'tokentap.request_id': who.id,
      'tokentap.route': who.route.label,
      'tokentap.outcome': summary.outcome,
      'tokentap.responses': summary.responses,
    }
    if (who.model !== undefined) attributes['gen_ai.request.model'] = who.model
    if (who.tenant !== undefined) attributes['tokentap.tenant'] = who.tenant
    if (summary.failure !== undefined) attributes['tokentap.failure_code'] = summary.failure
    if (summary.close?.code !== undefined) attributes['tokentap.close_code'] = summary.close.code
    if (summary.endedBy !== undefined) attributes['tokentap.ended_by'] = summary.endedBy
    if (failed)
      attributes['error.type'] =
        summary.failure ?? (summary.close?.code !== undefined ? String(summary.close.code) : String(summary.statusCode))
    this.#server(who.route.label, attributes)
    const end = who.tReq + summary.duration * 1000
    this.#export.add({
      name: `realtime_session ${who.model ?? 'unknown'}`,
      traceId: start.traceId,
      spanId: start.spanId,
      parent: parentOf(start),
      startMs: who.tReq + offset,
      endMs: end + offset,
      durationMs: end - who.tReq,
      attributes,
      events: [],
      status: failed ? ERROR : UNSET,
      statusMessage: failed ? String(attributes['error.type']) : undefined,
    })
  }

  #server(route: string, attributes: Attributes): void {
    const server = this.#options.serverOf?.(route)
    if (server !== undefined) {
      attributes['server.address'] = server.address
      attributes['server.port'] = server.port
    }
  }

  /** Exports the spans ended so far. Never throws. */
  flush(): Promise<void> {
    return this.#export.flush()
  }

  /** Exports what is left and stops. Never throws. */
  shutdown(): Promise<void> {
    return this.#export.shutdown()
  }
}

/** Where finished spans go: the export's thread, or the export in this one. */
interface SpanSink {
  add(span: SpanRecord): void
  /** Never throws. */
  flush(): Promise<void>
  /** Never throws. */
  shutdown(): Promise<void>
}

/**
 * The export in this thread, with an injected exporter (tests, benchmarks): what the worker thread
 * runs, without the thread. The SDK is imported only here; spans added before it has loaded wait
 * for it, in order (a flush comes after them).
 */
function inProcess(exporter: SpanExporter, logger: Logger): SpanSink {
  const spans = import('./span-export.ts').then(
    ({ SpanExport }) =>
      new SpanExport(exporter, {
        failed: (err) => logger.warn({ err }, 'OTLP traces export failed'),
        recovered: () => logger.info('OTLP traces export works again'),
      }),
  )
  return {
    add: (span) =>
      void spans
        .then((s) => s.add(span))
        .catch((err: unknown) => logger.debug({ err }, 'OTLP traces: a span was not added')),
    flush: () =>
      spans.then((s) => s.flush()).catch((err: unknown) => logger.debug({ err }, 'OTLP traces flush failed')),
    shutdown: () =>
      spans.then((s) => s.shutdown()).catch((err: unknown) => logger.debug({ err }, 'OTLP traces shutdown failed')),
  }
}

/** The caller's span (from its traceparent), the parent of tokentap's; undefined when there was none. */
function parentOf(start: TraceStart): ParentRecord | undefined {
  const parent = start.parent
  if (parent === undefined) return undefined
  return {
    traceId: parent.traceId,
    spanId: parent.spanId,
    sampled: parent.sampled,
    traceState: parent.traceState,
    remote: true,
  }
}
