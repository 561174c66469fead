import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { SpanExport } from '../../src/metrics/otel/span-export.ts'
import type { SpanRecord } from '../../src/metrics/otel/span-export.ts'
import type { SpanDescription } from '../../src/metrics/otel/span-out.ts'
import { tokentapTraceSerializer } from '../../src/metrics/otel/span-protobuf.ts'
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
export async function written(describes: readonly SpanDescription[]): Promise<ReadableSpan[]> {
  const batch = new SpanBatch()
  for (const d of describes) batch.write(d)
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
