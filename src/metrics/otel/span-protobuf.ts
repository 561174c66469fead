import { TraceFlags } from '@opentelemetry/api'
import type { Attributes, SpanContext } from '@opentelemetry/api'
import type { InstrumentationScope } from '@opentelemetry/core'
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer'
import type { IExportTraceServiceResponse, ISerializer } from '@opentelemetry/otlp-transformer'
import type { Resource } from '@opentelemetry/resources'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import {
  NotWritten,
  Writer,
  count,
  writeAttributes,
  writeEvent,
  writeSpanHead,
  writeSpanTail,
} from './protobuf-writer.ts'

/**
 * The OTLP/protobuf `ExportTraceServiceRequest` of a batch of spans, byte for byte what the SDK's
 * `ProtobufTraceSerializer` writes (`@opentelemetry/otlp-transformer` 0.223.0, trace-serializer.js
 * and common-serializer.js: the same fields in the same order, the same varints and fixed64s), in
 * one pass and with each attribute key's bytes encoded once per process. The SDK's serialiser was
 * ≈ 105,000–120,000 instructions of the export thread's ≈ 210,000 a span: it sizes the request in
 * a first pass and writes it in a second, each string character by character in both, and each
 * attribute through a for-in, a size estimate and a length shift (docs/performance.md, "Spans:
 * what tracing costs"). A request with anything this does not write (a link, an attribute value
 * that is not a string, number or boolean) is the SDK's serialiser's. Tests compare the bytes.
 * https://github.com/open-telemetry/opentelemetry-proto/blob/v1.7.0/opentelemetry/proto/trace/v1/trace.proto
 */

/** What the batch processor reads of an encoded span's context: that it is sampled. */
const SAMPLED: SpanContext = { traceId: '', spanId: '', traceFlags: TraceFlags.SAMPLED }

/**
 * A span whose `Span` message the main thread wrote when its request ended
 * (span-record-protobuf.ts): ScopeSpans' field 2 whole, its tag and length included. The export
 * thread hands it to the SDK's batch processor as it is (which reads only its context's sampled
 * flag and its resource), and the serialiser copies its bytes into the request.
 */
export class EncodedSpan {
  readonly bytes: Uint8Array
  readonly resource: Resource
  readonly instrumentationScope: InstrumentationScope

  constructor(bytes: Uint8Array, resource: Resource, scope: InstrumentationScope) {
    this.bytes = bytes
    this.resource = resource
    this.instrumentationScope = scope
  }

  spanContext(): SpanContext {
    return SAMPLED
  }
}

function writeSpan(w: Writer, span: ReadableSpan): void {
  if (span.links.length > 0) throw new NotWritten()
  const at = w.start()
  const ctx = span.spanContext()
  const parent = span.parentSpanContext
  const kind = span.kind == null ? 0 : span.kind + 1
  writeSpanHead(w, ctx.traceId, ctx.spanId, ctx.traceState?.serialize(), parent?.spanId, span.name, kind)
  w.byte(0x39)
  w.hrTime(span.startTime)
  w.byte(0x41)
  w.hrTime(span.endTime)
  if (span.attributes) writeAttributes(w, span.attributes, 0x4a)
  count(w, 0x50, span.droppedAttributesCount)
  for (const event of span.events) {
    w.byte(0x5a)
    writeEvent(w, event.time[0], event.time[1], event.name, event.attributes, event.droppedAttributesCount || 0)
  }
  const status = span.status
  writeSpanTail(
    w,
    span.droppedEventsCount,
    span.droppedLinksCount,
    status.message,
    status.code,
    ctx.traceFlags,
    parent?.isRemote === true,
  )
  w.finish(at)
}

function writeScope(
  w: Writer,
  scope: InstrumentationScope & { attributes?: Attributes; droppedAttributesCount?: number },
): void {
  w.byte(0x0a)
  const at = w.start()
  w.byte(0x0a)
  w.string(scope.name)
  if (scope.version) {
    w.byte(0x12)
    w.string(scope.version)
  }
  if (scope.attributes) writeAttributes(w, scope.attributes, 0x1a)
  if (scope.droppedAttributesCount) count(w, 0x20, scope.droppedAttributesCount)
  w.finish(at)
}

function writeResource(w: Writer, resource: Resource): void {
  w.byte(0x0a)
  const at = w.start()
  if (resource.attributes) writeAttributes(w, resource.attributes, 0x0a)
  w.byte(0x10)
  w.byte(0)
  w.finish(at)
}

/** Spans by resource, then by instrumentation scope, by identity and in first-seen order (the SDK's createResourceMap). */
function byResource(spans: readonly ReadableSpan[]): Map<Resource, Map<InstrumentationScope, ReadableSpan[]>> {
  const resources = new Map<Resource, Map<InstrumentationScope, ReadableSpan[]>>()
  for (const span of spans) {
    let scopes = resources.get(span.resource)
    if (scopes === undefined) {
      scopes = new Map()
      resources.set(span.resource, scopes)
    }
    let list = scopes.get(span.instrumentationScope)
    if (list === undefined) {
      list = []
      scopes.set(span.instrumentationScope, list)
    }
    list.push(span)
  }
  return resources
}

/** Bytes a span takes, about: the next request's first buffer (it grows when short). */
let bytesPerSpan = 1024

/** The request's bytes, or undefined when the fast path does not write something in it. */
export function writeTraceRequest(spans: readonly ReadableSpan[]): Uint8Array | undefined {
  const w = new Writer(Math.max(256, spans.length * bytesPerSpan + 512))
  try {
    for (const [resource, scopes] of byResource(spans)) {
      w.byte(0x0a)
      const resourceSpans = w.start()
      writeResource(w, resource)
      for (const list of scopes.values()) {
        w.byte(0x12)
        const scopeSpans = w.start()
        const scope = list[0].instrumentationScope
        writeScope(w, scope)
        for (const span of list) {
          if (span instanceof EncodedSpan) w.raw(span.bytes)
          else {
            w.byte(0x12)
            writeSpan(w, span)
          }
        }
        if (scope.schemaUrl) {
          w.byte(0x1a)
          w.string(scope.schemaUrl)
        }
        w.finish(scopeSpans)
      }
      if (resource.schemaUrl) {
        w.byte(0x1a)
        w.string(resource.schemaUrl)
      }
      w.finish(resourceSpans)
    }
  } catch (err) {
    if (err instanceof NotWritten) return undefined
    throw err
  }
  if (spans.length > 0) bytesPerSpan = Math.ceil((w.pos / spans.length) * 1.1)
  return w.buf.subarray(0, w.pos)
}

/**
 * The SDK's serialiser for the spans the fast path does not write. Encoded spans are not the SDK's
 * to read: they are written apart, and the two requests' bytes put end to end, which is one
 * request holding both's ResourceSpans (a parser appends a repeated field's elements as they come:
 * https://protobuf.dev/programming-guides/encoding/#last-one-wins).
 */
function bySdk(spans: readonly ReadableSpan[]): Uint8Array | undefined {
  const encoded = spans.filter((span) => span instanceof EncodedSpan)
  const sdk = ProtobufTraceSerializer.serializeRequest(spans.filter((span) => !(span instanceof EncodedSpan)))
  if (encoded.length === 0) return sdk
  const ours = writeTraceRequest(encoded) ?? new Uint8Array()
  if (sdk === undefined) return ours
  const both = new Uint8Array(ours.length + sdk.length)
  both.set(ours)
  both.set(sdk, ours.length)
  return both
}

/** The exporter's serialiser: the fast path, else the SDK's; responses are read by the SDK's. */
export const tokentapTraceSerializer: ISerializer<ReadableSpan[], IExportTraceServiceResponse> = {
  serializeRequest: (spans) => writeTraceRequest(spans) ?? bySdk(spans),
  deserializeResponse: (data) => ProtobufTraceSerializer.deserializeResponse(data),
}
