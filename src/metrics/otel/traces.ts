import type { SpanExporter } from '@opentelemetry/sdk-trace-base'
import type { Logger } from 'pino'
import type { OtelConfig, TracesConfig } from '../../config/schema.ts'
import { TraceIdSource } from '../../record/trace-context.ts'
import type { FinishedResponse } from '../../realtime/protocol.ts'
import type { RealtimeListener } from '../../realtime/realtime.ts'
import type { SessionIdentity, SessionSummary } from '../../realtime/session.ts'
import { Outcome } from '../../timing/measurement.ts'
import type { Observations } from '../../record/observations.ts'
import { sampledAtStart } from '../../timing/trace-sampling.ts'
import { describeRealtimeResponse, describeRealtimeSession } from './realtime-span.ts'
import type { RealtimeSpanContext } from './realtime-span.ts'
import { describeRequestSpan } from './request-span.ts'
import type { RequestSpanContext, ServerOf } from './request-span.ts'
import { recordOf } from './span-out.ts'
import type { SpanDescription } from './span-out.ts'
import { TraceThread } from './trace-thread.ts'
import { tracesEndpoint } from './config.ts'

/**
 * A span per proxied request, by the OpenTelemetry GenAI conventions for inference client spans
 * (docs/otel.md, "Traces"), built when the request has ended so nothing runs on the byte path.
 * This thread only gathers a kept request's figures into a plain record; the SDK's spans, the
 * batch processor and the OTLP exporter run in a worker thread of their own (trace-thread.ts), or
 * here when an exporter object is injected.
 */

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

  /** Tells the span of one finished request the recording policy kept (`o.trace` set) to the export. */
  record(o: Observations): void {
    const start = o.who.trace
    if (o.trace === undefined || start === undefined) return
    // Monotonic ms → epoch: one reading of both clocks per request, at its end (as the metrics' timestamps are read when recorded).
    const context: RequestSpanContext = {
      offsetMs: this.#wallMs() - this.#options.now(),
      stallMs: this.#options.stallSeconds * 1000,
      server: this.#options.serverOf?.(o.who.route.label),
    }
    this.#export.write((out) => describeRequestSpan(o, start, context, out))
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
    const spanId = this.#responseIds.spanId()
    const context = this.#realtimeContext(who)
    this.#export.write((out) => describeRealtimeResponse(who, start, spanId, r, context, out))
  }

  #session(who: SessionIdentity, summary: SessionSummary): void {
    const start = who.trace
    if (start === undefined) return
    const failed = summary.outcome === Outcome.error
    const withSpans = this.#sessionsWithSpans.delete(who.seq)
    if (!withSpans && !sampledAtStart(start, this.#options.traces.sample.ratio) && !(failed && this.#keepsErrors()))
      return
    const context = this.#realtimeContext(who)
    this.#export.write((out) => describeRealtimeSession(who, start, summary, context, out))
  }

  #realtimeContext(who: SessionIdentity): RealtimeSpanContext {
    return { offsetMs: this.#wallMs() - this.#options.now(), server: this.#options.serverOf?.(who.route.label) }
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
  /** A span, told from its figures. */
  write(describe: SpanDescription): void
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
    write: (describe) => {
      const span = recordOf(describe)
      void spans
        .then((s) => s.add(span))
        .catch((err: unknown) => logger.debug({ err }, 'OTLP traces: a span was not added'))
    },
    flush: () =>
      spans.then((s) => s.flush()).catch((err: unknown) => logger.debug({ err }, 'OTLP traces flush failed')),
    shutdown: () =>
      spans.then((s) => s.shutdown()).catch((err: unknown) => logger.debug({ err }, 'OTLP traces shutdown failed')),
  }
}
