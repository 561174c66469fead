import { SpanKind, TraceFlags, createTraceState } from '@opentelemetry/api'
import type { Attributes, SpanContext, SpanStatusCode } from '@opentelemetry/api'
import { ExportResultCode, millisToHrTime } from '@opentelemetry/core'
import type { ExportResult, InstrumentationScope } from '@opentelemetry/core'
import type { Resource } from '@opentelemetry/resources'
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan, SpanExporter, TimedEvent } from '@opentelemetry/sdk-trace-base'
import { tokentapResource } from './resource.ts'
import { EncodedSpan } from './span-protobuf.ts'

/**
 * The SDK side of the span export: finished spans, as the main thread's OTLP bytes
 * (`addEncoded`) or as plain records (`add`: a caller's tracestate, an in-process exporter),
 * handed to a BatchSpanProcessor and its exporter. It runs in the export's worker thread
 * (trace-worker.ts), or in process when a test or benchmark injects an exporter object.
 */

/** A finished span's figures: strings, numbers and plain objects only (what a record sent to the worker is cloned as). */
/** A finished span's name, ids, parent and times. */
export interface SpanHead {
  readonly name: string
  readonly traceId: string
  readonly spanId: string
  /** The caller's span; `remote`: it came in a traceparent (a realtime response's parent is its session's, local). */
  readonly parent: ParentRecord | undefined
  /** Epoch ms. */
  readonly startMs: number
  readonly endMs: number
  readonly durationMs: number
}

export interface SpanRecord extends SpanHead {
  readonly attributes: Attributes
  readonly events: readonly EventRecord[]
  readonly status: SpanStatusCode
  readonly statusMessage: string | undefined
}

export interface ParentRecord {
  readonly traceId: string
  readonly spanId: string
  readonly sampled: boolean
  /** The caller's tracestate header; a child carries it too, as the SDK's Tracer does. */
  readonly traceState: string | undefined
  readonly remote: boolean
}

export interface EventRecord {
  readonly name: string
  /** Epoch ms. */
  readonly timeMs: number
  readonly attributes?: Attributes
}

/** What the export tells about its collector: once when an outage starts, once when it ends. */
export interface ExportReport {
  failed(err: string | undefined): void
  recovered(): void
}

const SCOPE: InstrumentationScope = { name: 'tokentap' }

export class SpanExport {
  readonly #provider: BasicTracerProvider
  readonly #processor: BatchSpanProcessor
  readonly #resource: Resource

  constructor(exporter: SpanExporter, report: ExportReport) {
    this.#resource = tokentapResource()
    this.#processor = new BatchSpanProcessor(new ReportedSpanExporter(exporter, report))
    // The provider owns the processor: its forceFlush and shutdown are the export's.
    this.#provider = new BasicTracerProvider({ resource: this.#resource, spanProcessors: [this.#processor] })
  }

  /** Hands a finished span to the batch processor as a ReadableSpan (the SDK's Tracer would re-validate and re-time figures already typed and timed). */
  add(r: SpanRecord): void {
    const parent = r.parent
    const traceState = parent?.traceState === undefined ? undefined : createTraceState(parent.traceState)
    const context: SpanContext = { traceId: r.traceId, spanId: r.spanId, traceFlags: TraceFlags.SAMPLED, traceState }
    const parentContext: SpanContext | undefined =
      parent === undefined
        ? undefined
        : parent.remote
          ? {
              traceId: parent.traceId,
              spanId: parent.spanId,
              traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
              traceState,
              isRemote: true,
            }
          : { traceId: parent.traceId, spanId: parent.spanId, traceFlags: TraceFlags.SAMPLED }
    const events: TimedEvent[] = r.events.map((e) =>
      e.attributes === undefined
        ? { name: e.name, time: millisToHrTime(e.timeMs) }
        : { name: e.name, attributes: e.attributes, time: millisToHrTime(e.timeMs) },
    )
    const span: ReadableSpan = {
      name: r.name,
      kind: SpanKind.CLIENT,
      spanContext: () => context,
      parentSpanContext: parentContext,
      startTime: millisToHrTime(r.startMs),
      endTime: millisToHrTime(r.endMs),
      status: r.statusMessage === undefined ? { code: r.status } : { code: r.status, message: r.statusMessage },
      attributes: r.attributes,
      links: [],
      events,
      duration: millisToHrTime(Math.max(0, r.durationMs)),
      ended: true,
      resource: this.#resource,
      instrumentationScope: SCOPE,
      droppedAttributesCount: 0,
      droppedEventsCount: 0,
      droppedLinksCount: 0,
    }
    this.#processor.onEnd(span)
  }

  /**
   * Hands over spans the main thread wrote (span-record-protobuf.ts): ScopeSpans' `spans` fields
   * end to end, each a tag (2, length-delimited) and a varint length before its bytes.
   */
  addEncoded(bytes: Uint8Array): void {
    let at = 0
    while (at < bytes.length) {
      if (bytes[at] !== 0x12) throw new Error(`an encoded span starts with 0x12, not 0x${bytes[at].toString(16)}`)
      let length = 0
      let next = at + 1
      for (let shift = 0; ; shift += 7) {
        if (next >= bytes.length) throw new Error('an encoded span’s length runs past its batch')
        const b = bytes[next++]
        length += (b & 0x7f) * 2 ** shift
        if (b < 0x80) break
      }
      const end = next + length
      if (end > bytes.length) throw new Error('an encoded span runs past its batch')
      const span = new EncodedSpan(bytes.subarray(at, end), this.#resource, SCOPE)
      // The batch processor reads only what EncodedSpan has (its context's flags, its resource).
      this.#processor.onEnd(span as unknown as ReadableSpan)
      at = end
    }
  }

  /** Exports the spans added so far. */
  flush(): Promise<void> {
    return this.#provider.forceFlush()
  }

  /** Exports what is left and stops. */
  shutdown(): Promise<void> {
    return this.#provider.shutdown()
  }
}

/** Reports an exporter's failures: one per outage and one when it works again (the SDK reports only to `diag`). */
class ReportedSpanExporter implements SpanExporter {
  readonly #inner: SpanExporter
  readonly #report: ExportReport
  #failing = false

  constructor(inner: SpanExporter, report: ExportReport) {
    this.#inner = inner
    this.#report = report
  }

  export(spans: ReadableSpan[], resultCallback: (result: ExportResult) => void): void {
    this.#inner.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) {
        if (this.#failing) this.#report.recovered()
        this.#failing = false
      } else {
        if (!this.#failing) this.#report.failed(result.error?.message)
        this.#failing = true
      }
      resultCallback(result)
    })
  }

  async forceFlush(): Promise<void> {
    await this.#inner.forceFlush?.()
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown()
  }
}
