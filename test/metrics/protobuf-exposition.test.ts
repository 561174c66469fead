import t from 'tap'
import fc from 'fast-check'
import { Counter } from '../../src/metrics/prometheus/counter.ts'
import { CollectedGauge } from '../../src/metrics/prometheus/gauge.ts'
import { bucketIndex } from '../../src/histogram/mapping.ts'
import { Histogram, requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import type { NativeOptions } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import { wantsProtobuf } from '../../src/metrics/prometheus/protobuf.ts'
import { decodeFamilies, labelsOf, nativeBuckets } from '../helpers/protobuf-metrics.ts'
import type { PbFamily } from '../helpers/protobuf-metrics.ts'

const NATIVE: NativeOptions = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }
const BUCKETS = [0.01, 0.05, 0.1, 1, 2.5] as const

function itl(native = NATIVE): Histogram {
  return new Histogram({ name: 'llm_inter_token_latency_seconds', help: 'ITL.', labelNames: ['provider', 'model', 'route'], buckets: BUCKETS, native })
}

const encode = (...families: { protobufChunks(): Generator<Buffer> }[]): PbFamily[] => decodeFamilies(Buffer.concat(families.flatMap((f) => [...f.protobufChunks()])))

/** The core's exponential buckets as index → count. */
function coreBuckets(h: Histogram, ...labels: string[]): Map<number, number> {
  const out = new Map<number, number>()
  h.labels(...labels).core.forEachBucket((i, c) => out.set(i, c))
  return out
}

t.test('a histogram decodes with the official metrics.proto to the same classic and native counts, weighted observations counting k', async (t) => {
  const h = itl()
  const s = h.labels('openai', 'gpt-4o', '/v1')
  // Token-weighted ITL: a chunk of 4 tokens after 80 ms is 4 observations of 20 ms.
  s.observe(0.08 / 4, 4)
  s.observe(0.15)
  s.observe(0.6, 3)
  s.observe(1.3, 2)
  s.observe(0)
  s.observe(40)
  const [f] = encode(h)
  t.equal(f.name, 'llm_inter_token_latency_seconds')
  t.equal(f.type, 'HISTOGRAM')
  t.equal(f.help, 'ITL.')
  t.equal(f.metric.length, 1)
  const m = f.metric[0]
  t.same(labelsOf(m), { provider: 'openai', model: 'gpt-4o', route: '/v1' })
  const pb = m.histogram
  if (pb === undefined) throw new Error('no histogram')
  t.equal(pb.sample_count, 12, '4 + 1 + 3 + 2 + 1 + 1 observations')
  t.ok(Math.abs(pb.sample_sum - (0.08 + 0.15 + 1.8 + 2.6 + 40)) < 1e-9)
  t.same(
    pb.bucket.map((b) => [b.upper_bound, b.cumulative_count ?? 0]),
    [
      [0.01, 1],
      [0.05, 5],
      [0.1, 5],
      [1, 9],
      [2.5, 11],
      [Number.POSITIVE_INFINITY, 12],
    ],
    'classic buckets, cumulative, +Inf last',
  )
  t.equal(pb.schema, 3)
  t.equal(pb.zero_threshold, 2 ** -128)
  t.equal(pb.zero_count, 1, 'the 0 is in the zero bucket')
  const native = nativeBuckets(pb)
  t.same([...native.entries()], [...coreBuckets(h, 'openai', 'gpt-4o', '/v1').entries()], 'spans and deltas give back every bucket of the core')
  t.equal(native.get(bucketIndex(0.02, 3)), 4, 'the weighted observation counts 4 in its bucket')
  t.equal(native.get(bucketIndex(1.3, 3)), 2)
  t.equal([...native.values()].reduce((a, b) => a + b, 0) + (pb.zero_count ?? 0), 12, 'native buckets and zero bucket hold every observation')
})

t.test('buckets far apart are written as several spans, short gaps as zeros inside one span', async (t) => {
  const h = itl()
  const s = h.labels('p', 'm', 'r')
  const near = [1.01, 2 ** (2 / 8) * 1.01, 2 ** (5 / 8) * 1.01]
  for (const v of near) s.observe(v)
  s.observe(1000)
  s.observe(0.001, 7)
  const pb = encode(h)[0].metric[0].histogram
  if (pb === undefined) throw new Error('no histogram')
  t.equal(pb.positive_span.length, 3, 'three groups: 0.001, the three near 1, 1000')
  t.same([...nativeBuckets(pb).entries()], [...coreBuckets(h, 'p', 'm', 'r').entries()])
})

t.test('an empty series is still a native histogram (a span of no buckets), and a family without native buckets has no schema', async (t) => {
  const h = itl()
  h.labels('p', 'm', 'r')
  const pb = encode(h)[0].metric[0].histogram
  t.equal(pb?.schema, 3)
  t.same(pb?.positive_span, [{ offset: 0, length: 0 }])
  const classic = new Histogram({ name: 'x_seconds', help: 'x', labelNames: [], buckets: BUCKETS })
  classic.labels().observe(0.2)
  const c = encode(classic)[0].metric[0].histogram
  t.equal(c?.schema, undefined)
  t.equal(c?.positive_span.length, 0)
  t.equal(c?.sample_count, 1)
})

t.test('exemplars ride on the classic buckets and on the native histogram, with wall-clock timestamps', async (t) => {
  const h = itl()
  const s = h.labels('p', 'm', 'r')
  s.observeWithExemplar(0.02, 4, requestIdExemplar('req-"1"'), 1_700_000_000.25)
  s.observeWithExemplar(1.3, 1, requestIdExemplar('req-2'), 1_700_000_001)
  const pb = encode(h)[0].metric[0].histogram
  if (pb === undefined) throw new Error('no histogram')
  const onBuckets = pb.bucket.filter((b) => b.exemplar !== undefined).map((b) => [b.upper_bound, b.exemplar?.label[0].value, b.exemplar?.value])
  t.same(onBuckets, [
    [0.05, 'req-"1"', 0.02],
    [2.5, 'req-2', 1.3],
  ])
  t.same(
    pb.exemplars.map((e) => [labelsOf(e).request_id, e.value, e.timestamp?.seconds, e.timestamp?.nanos ?? 0]),
    [
      ['req-"1"', 0.02, 1_700_000_000, 250_000_000],
      ['req-2', 1.3, 1_700_000_001, 0],
    ],
    'the native exemplars, by value, each with its timestamp',
  )
})

t.test('counters and gauges decode to their values', async (t) => {
  const c = new Counter({ name: 'llm_requests_total', help: 'Requests.', labelNames: ['outcome'] })
  c.labels('ok').inc(3)
  c.labels('error').inc()
  const g = new CollectedGauge({ name: 'llm_requests_in_flight', help: 'In flight.', labelNames: ['route'], collect: (add) => add(['/v1'], 2) })
  const [counter, gauge] = encode(c, g)
  t.equal(counter.type, 'COUNTER')
  t.equal(counter.name, 'llm_requests_total', 'the protobuf family keeps _total (only OpenMetrics drops it)')
  t.same(
    counter.metric.map((m) => [labelsOf(m).outcome, m.counter?.value]),
    [
      ['ok', 3],
      ['error', 1],
    ],
  )
  t.equal(gauge.type, 'GAUGE')
  t.same(
    gauge.metric.map((m) => [labelsOf(m), m.gauge?.value]),
    [[{ route: '/v1' }, 2]],
  )
})

t.test('the registry streams every family, the process metrics included, as delimited messages the official schema reads', async (t) => {
  const registry = new MetricsRegistry({ processMetrics: true, protobuf: true })
  const h = itl()
  registry.register(h)
  h.labels('p', 'm', 'r').observe(0.3, 2)
  const stream = registry.protobuf
  if (stream === undefined) throw new Error('no protobuf exposition')
  const batches: Buffer[] = []
  for await (const batch of stream()) {
    batches.push(...batch.map((b) => Buffer.from(b)))
    registry.recycle(batch)
  }
  const families = decodeFamilies(Buffer.concat(batches))
  t.equal(families[0].name, 'llm_inter_token_latency_seconds')
  t.equal(families[0].metric[0].histogram?.sample_count, 2)
  const names = families.map((f) => f.name)
  t.ok(names.includes('process_cpu_user_seconds_total'), 'process metrics are there')
  const gc = families.find((f) => f.name === 'nodejs_gc_duration_seconds')
  t.equal(gc?.type, 'HISTOGRAM', "prom-client's histograms stay histograms")
  t.equal(new Set(names).size, names.length, 'each family once')
  t.equal(new MetricsRegistry({ processMetrics: false }).protobuf, undefined, 'with native histograms off there is no protobuf exposition')
})

t.test('Accept negotiation: protobuf only when the scraper prefers it', async (t) => {
  const prometheusNative =
    'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'
  t.ok(wantsProtobuf(prometheusNative), "Prometheus 2.x's header with native histograms on")
  t.ok(wantsProtobuf('application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2'), 'first and highest at 0.7')
  t.notOk(wantsProtobuf('application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'), 'the default header')
  t.notOk(wantsProtobuf('text/plain,application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited'), 'listed after text at the same q')
  t.notOk(wantsProtobuf('application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text'), 'the text encoding of protobuf is not served')
  t.notOk(wantsProtobuf('application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0'), 'q=0 refuses it')
  t.notOk(wantsProtobuf(undefined))
})

t.test('the bucket limit holds in the encoded message whatever is observed, and nothing is lost', async () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.double({ min: 0, max: 1e9, noNaN: true }), fc.integer({ min: 1, max: 100 })), { maxLength: 300 }), fc.integer({ min: 1, max: 30 }), (values, limit) => {
      const h = itl({ schema: 3, zeroThreshold: 2 ** -128, maxBuckets: limit })
      const s = h.labels('p', 'm', 'r')
      let count = 0
      for (const [v, w] of values) {
        s.observe(v, w)
        count += w
      }
      const pb = encode(h)[0].metric[0].histogram
      if (pb === undefined) return false
      const native = nativeBuckets(pb)
      const total = [...native.values()].reduce((a, b) => a + b, 0) + (pb.zero_count ?? 0)
      return (native.size <= limit || pb.schema === -4) && total === count && (pb.sample_count ?? 0) === count
    }),
  )
})
