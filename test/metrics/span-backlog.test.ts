import { once } from 'node:events'
import { EventEmitter } from 'node:events'
import t from 'tap'
import { SpanBacklog, batchSettings } from '../../src/metrics/otel/span-backlog.ts'
import type { BatchSettings, SpanSinkForBacklog } from '../../src/metrics/otel/span-backlog.ts'
import type { SpanRecord } from '../../src/metrics/otel/span-export.ts'
import { SpanRecords, transferable } from '../../src/metrics/otel/span-records.ts'
import type { SerialisedSpans } from '../../src/metrics/otel/span-records.ts'

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'

/** A kept request's record as OtelTraces builds it: strings, numbers, a parent, events with attributes. */
function record(i: number): SpanRecord {
  return {
    name: `chat m${i}`,
    traceId: TRACE,
    spanId: `00f067aa0ba902b${i}`,
    parent: i % 2 === 0 ? undefined : { traceId: TRACE, spanId: 'aaaaaaaaaaaaaaaa', sampled: true, traceState: 'k=v', remote: true },
    startMs: 1_700_000_000_000 + i,
    endMs: 1_700_000_000_100.5 + i,
    durationMs: 100.5,
    attributes: { 'gen_ai.request.model': `m${i}`, 'tokentap.ttft': 0.0125, 'tokentap.stalls': i, 'gen_ai.request.stream': true },
    events: [
      { name: 'tokentap.first_token', attributes: { 'tokentap.tokens': 1 }, timeMs: 1_700_000_000_012.5 },
      { name: 'tokentap.end', timeMs: 1_700_000_000_100.5 },
    ],
    status: 0,
    statusMessage: i === 2 ? 'boom' : undefined,
  }
}

/** A sink that keeps what it is handed and emits `flush` at each export. */
function recordingSink(fail = false): SpanSinkForBacklog & { added: SpanRecord[]; flushes: number; events: EventEmitter } {
  const events = new EventEmitter()
  const sink = {
    added: [] as SpanRecord[],
    flushes: 0,
    events,
    add: (r: SpanRecord) => void sink.added.push(r),
    flush: async () => {
      sink.flushes++
      events.emit('flush')
      if (fail) throw new Error('collector down')
    },
  }
  return sink
}

/** The batch so far, which the test has just filled. */
function released(records: SpanRecords): SerialisedSpans {
  const batch = records.release()
  if (batch === undefined) throw new Error('no batch')
  return batch
}

const settings = (s: Partial<BatchSettings>): BatchSettings => ({ maxExportBatchSize: 512, maxQueueSize: 2048, scheduledDelayMillis: 60_000, ...s })

t.test('records serialised in the proxy’s thread come out of the backlog as the same records, in order, once a batch is full', async (t) => {
  const records = new SpanRecords()
  t.equal(records.release(), undefined, 'nothing added: no batch')
  for (let i = 0; i < 3; i++) records.add(record(i))
  t.equal(records.count, 3)
  const batch = released(records)
  t.equal(records.count, 0, 'released: the next add starts another batch')
  t.equal(batch.count, 3)
  const sink = recordingSink()
  const backlog = new SpanBacklog(sink, settings({ maxExportBatchSize: 3 }))
  const exported = once(sink.events, 'flush')
  backlog.push(batch)
  await exported
  t.same(sink.added, [0, 1, 2].map(record), 'the same strings, numbers, parents and events; undefined fields kept undefined')
  t.equal(sink.flushes, 1, 'exported at once: the batch processor’s size was reached')
})

t.test('fewer spans than a batch wait, serialised, for the delay or a flush', async (t) => {
  const sink = recordingSink()
  const backlog = new SpanBacklog(sink, settings({}))
  const records = new SpanRecords()
  records.add(record(0))
  backlog.push(released(records))
  records.add(record(1))
  backlog.push(released(records))
  t.same(sink.added, [], 'nothing built before the export is due')
  await backlog.export()
  t.same(
    sink.added.map((r) => r.name),
    ['chat m0', 'chat m1'],
    'a flush builds and exports every waiting span, in order',
  )
  await backlog.export()
  t.equal(sink.added.length, 2, 'a second flush has nothing more')

  const timed = recordingSink()
  const soon = new SpanBacklog(timed, settings({ scheduledDelayMillis: 1 }))
  records.add(record(3))
  const exported = once(timed.events, 'flush')
  soon.push(released(records))
  await exported
  t.same(
    timed.added.map((r) => r.name),
    ['chat m3'],
    'exported after the delay without a flush',
  )
})

t.test('beyond the queue, a batch is dropped and counted, as the batch processor drops spans beyond its queue', async (t) => {
  const sink = recordingSink()
  const backlog = new SpanBacklog(sink, settings({ maxQueueSize: 4, maxExportBatchSize: 4 }))
  const records = new SpanRecords()
  for (let i = 0; i < 3; i++) records.add(record(i))
  backlog.push(released(records))
  for (let i = 3; i < 5; i++) records.add(record(i))
  backlog.push(released(records))
  t.equal(backlog.dropped, 2, 'the second batch would have made 5 waiting')
  await backlog.export()
  t.same(
    sink.added.map((r) => r.name),
    ['chat m0', 'chat m1', 'chat m2'],
  )
})

t.test('a failed export rejects a flush and is quiet when the backlog exports by itself', async (t) => {
  const sink = recordingSink(true)
  const backlog = new SpanBacklog(sink, settings({ maxExportBatchSize: 1 }))
  const records = new SpanRecords()
  records.add(record(0))
  const exported = once(sink.events, 'flush')
  backlog.push(released(records))
  await exported
  // An unhandled rejection would fail this test (tap reports it); give the export's promise its turn.
  await new Promise((r) => setImmediate(r))
  records.add(record(1))
  backlog.push(released(records))
  await t.rejects(backlog.export(), /collector down/, 'a flush hears of it (the worker answers the flush with the error)')
})

t.test('a batch is transferred whole to the export’s thread, and a view into a larger buffer is copied instead', async (t) => {
  const records = new SpanRecords()
  records.add(record(0))
  const batch = released(records)
  t.same(transferable(batch), [batch.records.buffer], 'the serialiser’s own buffer moves without a copy')
  const big = new Uint8Array(64)
  t.same(transferable({ count: 1, records: big.subarray(8, 16) }), [], 'a view: no transfer, postMessage copies it')
})

t.test('the batch settings are the SDK’s defaults and OTEL_BSP_* variables, read once for the processor and the backlog', async (t) => {
  const saved = { ...process.env }
  t.teardown(() => {
    for (const k of ['OTEL_BSP_MAX_QUEUE_SIZE', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 'OTEL_BSP_SCHEDULE_DELAY']) {
      if (saved[k] === undefined) delete process.env[k]
      else process.env[k] = saved[k]
    }
  })
  delete process.env.OTEL_BSP_MAX_QUEUE_SIZE
  delete process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE
  delete process.env.OTEL_BSP_SCHEDULE_DELAY
  t.same(batchSettings(), { maxExportBatchSize: 512, maxQueueSize: 2048, scheduledDelayMillis: 5000 })
  process.env.OTEL_BSP_SCHEDULE_DELAY = '250'
  process.env.OTEL_BSP_MAX_QUEUE_SIZE = '100'
  process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE = '300'
  t.same(batchSettings(), { maxExportBatchSize: 100, maxQueueSize: 100, scheduledDelayMillis: 250 }, 'a batch never larger than the queue, as the SDK clamps it')
  process.env.OTEL_BSP_SCHEDULE_DELAY = 'soon'
  process.env.OTEL_BSP_MAX_QUEUE_SIZE = '0'
  t.same(batchSettings(), { maxExportBatchSize: 300, maxQueueSize: 2048, scheduledDelayMillis: 5000 }, 'what is not a positive number is left at the default')
})
