import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer'
import type { Test } from 'tap'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { SpanExport } from '../../src/metrics/otel/span-export.ts'
import type { SpanRecord } from '../../src/metrics/otel/span-export.ts'
import { recordOf } from '../../src/metrics/otel/span-out.ts'
import type { SpanDescription } from '../../src/metrics/otel/span-out.ts'
import { EncodedSpan, tokentapTraceSerializer } from '../../src/metrics/otel/span-protobuf.ts'
import { SpanBatch } from '../../src/metrics/otel/span-record-protobuf.ts'

/** Spans told to the main thread's writer, and the same spans' records handed to the SDK: the two requests' bytes. */

const QUIET = { failed: () => undefined, recovered: () => undefined }

/** The spans as the SDK writes them from their records. */
export async function sdkBytes(records: readonly SpanRecord[]): Promise<Buffer> {
  const exporter = new InMemorySpanExporter()
  const spans = new SpanExport(exporter, QUIET)
  for (const r of records) spans.add(r)
  await spans.flush()
  return Buffer.from(ProtobufTraceSerializer.serializeRequest(exporter.getFinishedSpans()) ?? [])
}

/** What the export's thread hands its exporter when the main thread told it these spans. */
export function written(describes: readonly SpanDescription[]): Promise<ReadableSpan[]> {
  const batch = new SpanBatch()
  for (const d of describes) batch.write(d)
  return handedOver(batch)
}

/** What the export's thread hands its exporter for a batch the main thread took (trace-thread.ts, trace-worker.ts). */
export async function handedOver(batch: SpanBatch): Promise<ReadableSpan[]> {
  const { bytes, records } = batch.take()
  const exporter = new InMemorySpanExporter()
  const spans = new SpanExport(exporter, QUIET)
  if (bytes !== undefined) spans.addEncoded(bytes)
  for (const r of records) spans.add(r)
  await spans.flush()
  return exporter.getFinishedSpans()
}

/** The request the exporter sends for spans the export's thread was handed. */
export function requestBytes(spans: ReadableSpan[]): Buffer {
  return Buffer.from(tokentapTraceSerializer.serializeRequest(spans) ?? [])
}

/**
 * Spans told to the main thread's writer reach the exporter as the SDK's bytes for the records of
 * the same descriptions: each written by the main thread but for one with a caller's tracestate,
 * which goes over as its record (and so after the written ones in the request).
 */
export async function writtenAsTheSdk(t: Test, what: string, describes: readonly SpanDescription[]): Promise<void> {
  const records = describes.map(recordOf)
  const spans = await written(describes)
  const plain = records.filter((r) => r.parent?.traceState === undefined)
  const withState = records.filter((r) => r.parent?.traceState !== undefined)
  t.same(
    spans.map((s) => s instanceof EncodedSpan),
    [...plain.map(() => true), ...withState.map(() => false)],
    `${what}: written by the main thread but for a tracestate`,
  )
  t.same(requestBytes(spans), await sdkBytes([...plain, ...withState]), `${what}: the SDK’s bytes`)
}
