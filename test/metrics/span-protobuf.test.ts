import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import t from 'tap'
import type { Test } from 'tap'
import { SpanExport } from '../../src/metrics/otel/span-export.ts'
import type { SpanRecord } from '../../src/metrics/otel/span-export.ts'
import { EncodedSpan, tokentapTraceSerializer, writeTraceRequest } from '../../src/metrics/otel/span-protobuf.ts'
import { SpanBatch } from '../../src/metrics/otel/span-record-protobuf.ts'
import { decodeTraceRequest } from '../helpers/otlp-receiver.ts'
import { handedOver } from '../helpers/span-bytes.ts'

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const QUIET = { failed: () => undefined, recovered: () => undefined }

/** The SDK's ReadableSpans for these records, as SpanExport hands them to the batch processor. */
async function spansOf(records: readonly SpanRecord[]): Promise<ReadableSpan[]> {
  const exporter = new InMemorySpanExporter()
  const spans = new SpanExport(exporter, QUIET)
  for (const r of records) spans.add(r)
  await spans.flush()
  return exporter.getFinishedSpans()
}

function record(i: number, over: Partial<SpanRecord> = {}): SpanRecord {
  return {
    name: `chat model-${i}`,
    traceId: TRACE,
    spanId: (0x1000000000000000n + BigInt(i)).toString(16),
    parent: undefined,
    startMs: 1_765_000_000_000 + i * 1.5,
    endMs: 1_765_000_000_250.25 + i,
    durationMs: 250.25,
    attributes: { 'gen_ai.provider.name': 'openai', 'tokentap.request_id': `req-${i}`, 'gen_ai.usage.output_tokens': i, 'tokentap.ttft': 0.0125 },
    events: [
      { name: 'tokentap.first_token', attributes: { 'tokentap.tokens': 1 }, timeMs: 1_765_000_000_012.5 },
      { name: 'tokentap.end', attributes: { 'tokentap.outcome': 'ok' }, timeMs: 1_765_000_000_250.25 },
    ],
    status: 0,
    statusMessage: undefined,
    ...over,
  }
}

const sdkBytes = (spans: ReadableSpan[]): Uint8Array => ProtobufTraceSerializer.serializeRequest(spans) ?? new Uint8Array()

/** Every kind of span tokentap exports, and the value edges its attributes reach. */
function cases(): [string, SpanRecord[]][] {
  const long = 'x'.repeat(300)
  const many: Record<string, string | number | boolean> = {}
  for (let k = 0; k < 400; k++) many[`tokentap.k${k}`] = k % 3 === 0 ? `v${k}` : k % 3 === 1 ? k * 1.25 : k % 2 === 0
  return [
    ['a plain streamed request', [record(1)]],
    [
      'a caller’s span with its tracestate, and a local parent',
      [
        record(2, { parent: { traceId: TRACE, spanId: 'aaaaaaaaaaaaaaaa', sampled: true, traceState: 'vendor=x,other=y', remote: true } }),
        record(3, { parent: { traceId: TRACE, spanId: 'bbbbbbbbbbbbbbbb', sampled: false, traceState: undefined, remote: false } }),
      ],
    ],
    ['an error with its message, and no events', [record(4, { status: 2, statusMessage: 'upstream_5xx: 503 — überlastet', events: [] })]],
    [
      'every value kind and its edges',
      [
        record(5, {
          attributes: {
            ints: 0,
            small: 127,
            two: 128,
            big: 2 ** 31,
            bigger: 2 ** 32,
            huge: 2 ** 40 + 7,
            safe: Number.MAX_SAFE_INTEGER,
            pow: 2 ** 62,
            negative: -1,
            negativeBig: -(2 ** 40) - 3,
            half: 0.5,
            tiny: 1e-9,
            nan: Number.NaN,
            inf: Number.POSITIVE_INFINITY,
            beyond: 2 ** 64,
            yes: true,
            no: false,
            empty: '',
            accents: 'café crème',
            emoji: 'tokens 🚀 and a lone \ud800 surrogate',
            cjk: '日本語のモデル',
            long,
            'ключ.ünicode': 'key not ASCII',
          },
        }),
      ],
    ],
    ['a span over 16 KiB (a three-byte length) and names not ASCII', [record(6, { name: 'chat modèle-🚀', attributes: many })]],
    ['a batch of 600 spans (ScopeSpans over 512 KiB)', Array.from({ length: 600 }, (_, i) => record(100 + i))],
    ['no spans', []],
  ]
}

t.test('tokentap’s serialiser writes the SDK’s bytes for every kind of span tokentap exports', async (t) => {
  for (const [what, records] of cases()) {
    const spans = await spansOf(records)
    const ours = writeTraceRequest(spans)
    t.ok(ours !== undefined, `${what}: written by the fast path`)
    t.same(Buffer.from(ours ?? []), Buffer.from(sdkBytes(spans)), `${what}: the same bytes`)
  }
})

t.test('spans of two resources and two scopes are grouped as the SDK groups them, in first-seen order', async (t) => {
  const [a, b, c] = await spansOf([record(1), record(2), record(3)])
  const other = resourceFromAttributes({ 'service.name': 'other', 'service.instance.id': 'i-2' })
  const scope = { name: 'another', version: '1.2.3', schemaUrl: 'https://opentelemetry.io/schemas/1.37.0' }
  const spans: ReadableSpan[] = [a, { ...b, resource: other }, { ...c, instrumentationScope: scope }, { ...a, instrumentationScope: scope }]
  t.same(Buffer.from(writeTraceRequest(spans) ?? []), Buffer.from(sdkBytes(spans)))
})

t.test('a span the fast path does not write (a link, an array value) goes to the SDK’s serialiser whole', async (t) => {
  const [span] = await spansOf([record(1)])
  const withArray: ReadableSpan = { ...span, attributes: { ...span.attributes, list: ['a', 'b'] } }
  const withLink: ReadableSpan = { ...span, links: [{ context: { traceId: TRACE, spanId: 'cccccccccccccccc', traceFlags: 1 }, attributes: {} }] }
  for (const [what, spans] of [
    ['an array attribute', [span, withArray]],
    ['a link', [withLink]],
  ] as const) {
    t.equal(writeTraceRequest([...spans]), undefined, `${what}: not written by the fast path`)
    t.same(Buffer.from(tokentapTraceSerializer.serializeRequest([...spans]) ?? []), Buffer.from(sdkBytes([...spans])), `${what}: the SDK’s bytes`)
  }
})

/** What the export's thread hands its exporter for these records when the main thread wrote them (trace-thread.ts, trace-worker.ts). */
async function recordsHandedOver(t: Test, records: readonly SpanRecord[]): Promise<ReadableSpan[]> {
  const batch = new SpanBatch()
  for (const r of records) batch.add(r)
  t.equal(batch.size, records.length)
  const spans = await handedOver(batch)
  t.equal(batch.size, 0, 'a take empties the batch')
  return spans
}

t.test('spans the main thread writes are the bytes the SDK writes for the same records, but those with a caller’s tracestate, which the SDK reads', async (t) => {
  for (const [what, records] of cases()) {
    const spans = await recordsHandedOver(t, records)
    const written = records.filter((r) => r.parent?.traceState === undefined)
    const read = records.filter((r) => r.parent?.traceState !== undefined)
    t.same(
      spans.map((s) => s instanceof EncodedSpan),
      [...written.map(() => true), ...read.map(() => false)],
      `${what}: written by the main thread but for a tracestate`,
    )
    const ours = tokentapTraceSerializer.serializeRequest(spans)
    t.same(Buffer.from(ours ?? []), Buffer.from(sdkBytes(await spansOf([...written, ...read]))), `${what}: the SDK’s bytes`)
  }
})

t.test('a record whose value the main thread does not write goes over as the record, and the batch after it is whole', async (t) => {
  const odd = record(2, { attributes: { 'tokentap.list': ['a', 'b'] as unknown as string } })
  const records = [record(1), odd, record(3)]
  const batch = new SpanBatch()
  for (const r of records) batch.add(r)
  const { bytes, records: read } = batch.take()
  t.same(read, [odd], 'the odd record, kept as it is')
  const exporter = new InMemorySpanExporter()
  const spans = new SpanExport(exporter, QUIET)
  if (bytes !== undefined) spans.addEncoded(bytes)
  await spans.flush()
  t.same(Buffer.from(writeTraceRequest(exporter.getFinishedSpans()) ?? []), Buffer.from(sdkBytes(await spansOf([record(1), record(3)]))), 'the others, as the SDK writes them')
})

t.test('a request with written spans and a span only the SDK writes holds both, as two ResourceSpans', async (t) => {
  const [encoded] = await recordsHandedOver(t, [record(1)])
  const [span] = await spansOf([record(2)])
  const withArray: ReadableSpan = { ...span, attributes: { ...span.attributes, list: ['a', 'b'] } }
  const bytes = tokentapTraceSerializer.serializeRequest([encoded, withArray])
  const got = decodeTraceRequest(Buffer.from(bytes ?? []))
  t.same(
    got.map((s) => [s.name, s.spanId, s.scope, s.resource['service.name']]),
    [
      ['chat model-1', record(1).spanId, 'tokentap', 'tokentap'],
      ['chat model-2', record(2).spanId, 'tokentap', 'tokentap'],
    ],
  )
  t.ok('list' in got[1].attributes, 'the SDK’s span keeps its array attribute')
})

t.test('a batch of spans over a megabyte is handed over whole, and the batches after it are written as before', async (t) => {
  const huge = record(1, { attributes: { 'tokentap.pad': 'p'.repeat(1536 * 1024) } })
  t.same(
    Buffer.from(tokentapTraceSerializer.serializeRequest(await recordsHandedOver(t, [huge, record(2)])) ?? []),
    Buffer.from(sdkBytes(await spansOf([huge, record(2)]))),
    'the large batch: the SDK’s bytes',
  )
  const batch = new SpanBatch()
  batch.add(huge)
  t.ok((batch.take().bytes?.length ?? 0) > 1536 * 1024)
  batch.add(record(3))
  t.same(Buffer.from(writeTraceRequest(await handedOver(batch)) ?? []), Buffer.from(sdkBytes(await spansOf([record(3)]))), 'the next batch: the SDK’s bytes')
})

t.test('a corrupt batch is refused with an error, never read past its end', async (t) => {
  const spans = new SpanExport(new InMemorySpanExporter(), QUIET)
  t.teardown(() => spans.shutdown())
  t.throws(() => spans.addEncoded(Uint8Array.of(0x0a, 0x00)), /starts with 0x12/)
  t.throws(() => spans.addEncoded(Uint8Array.of(0x12, 0x80)), /runs past its batch/)
  t.throws(() => spans.addEncoded(Uint8Array.of(0x12, 0x05, 0x00)), /runs past its batch/)
})
