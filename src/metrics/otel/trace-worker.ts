import { parentPort, workerData } from 'node:worker_threads'
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base'
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http'
import { TraceExporterMetricsHelper } from '@opentelemetry/otlp-transformer'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { tokentapTraceSerializer } from './span-protobuf.ts'
import { SpanExport } from './span-export.ts'
import type { FromTraceThread, ToTraceThread, TraceThreadSettings } from './trace-thread.ts'

/**
 * The span export's thread (started by trace-thread.ts): the batch processor, the OTLP
 * serialiser and its HTTP client live in this isolate, so none of their
 * object shapes reaches the Node stream, socket and timer functions the proxy's byte path runs
 * hot in the main one (docs/performance.md, "Spans: what tracing costs").
 */

const port = parentPort
if (port === null) throw new Error('trace-worker.ts runs as a worker thread')
const settings = workerData as TraceThreadSettings
const send = (m: FromTraceThread): void => port.postMessage(m)
/**
 * The official OTLP/HTTP protobuf trace exporter as `@opentelemetry/exporter-trace-otlp-proto`
 * 0.223.0 builds it (its HTTP transport, retries, headers, timeout and `OTEL_EXPORTER_OTLP_*`),
 * with tokentap's serialiser, which writes the same bytes as the SDK's in a fraction of the time
 * (span-protobuf.ts).
 */
const exporter = new OTLPExporterBase<ReadableSpan[]>(
  createOtlpHttpExportDelegate(
    convertLegacyHttpOptions(
      { url: settings.url, headers: settings.headers, timeoutMillis: settings.timeoutMillis },
      'TRACES',
      'v1/traces',
      { 'Content-Type': 'application/x-protobuf' },
    ),
    tokentapTraceSerializer,
    'otlp_http_span_exporter',
    TraceExporterMetricsHelper,
    undefined,
  ),
)
const spans = new SpanExport(exporter, {
  failed: (err) => send({ kind: 'failed', err }),
  recovered: () => send({ kind: 'recovered' }),
})
// Messages arrive in the order they were posted: a flush comes after every span posted before it.
port.on('message', (m: ToTraceThread) => {
  if (m.kind === 'spans') {
    try {
      if (m.bytes !== undefined) spans.addEncoded(m.bytes)
    } catch (err) {
      // A batch this thread cannot read costs its spans and a warning, never the thread.
      send({ kind: 'failed', err: String(err) })
    }
    for (const r of m.records) spans.add(r)
    return
  }
  const done = (): void => send({ kind: 'done', id: m.id, err: undefined })
  const failed = (err: unknown): void => send({ kind: 'done', id: m.id, err: String(err) })
  if (m.kind === 'flush') void spans.flush().then(done, failed)
  else
    void spans
      .shutdown()
      .then(done, failed)
      .finally(() => port.close())
})
