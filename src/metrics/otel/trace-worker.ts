import { parentPort, workerData } from 'node:worker_threads'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { SpanExport } from './span-export.ts'
import type { FromTraceThread, ToTraceThread, TraceThreadSettings } from './trace-thread.ts'

/**
 * The span export's thread (started by trace-thread.ts): the spans' SDK objects, the batch
 * processor, the OTLP serialiser and its HTTP client live in this isolate, so none of their
 * object shapes reaches the Node stream, socket and timer functions the proxy's byte path runs
 * hot in the main one (docs/performance.md, "Spans: what tracing costs").
 */

const port = parentPort
if (port === null) throw new Error('trace-worker.ts runs as a worker thread')
const settings = workerData as TraceThreadSettings
const send = (m: FromTraceThread): void => port.postMessage(m)
const spans = new SpanExport(
  new OTLPTraceExporter({ url: settings.url, headers: settings.headers, timeoutMillis: settings.timeoutMillis }),
  { failed: (err) => send({ kind: 'failed', err }), recovered: () => send({ kind: 'recovered' }) },
)
// Messages arrive in the order they were posted: a flush comes after every span posted before it.
port.on('message', (m: ToTraceThread) => {
  if (m.kind === 'spans') {
    for (const r of m.spans) spans.add(r)
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
