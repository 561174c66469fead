import { deserialize, serialize } from 'node:v8'
import t from 'tap'
import fc from 'fast-check'
import { ClusterMetrics, StateReporter } from '../../src/cluster/metrics.ts'
import type { WorkerMetrics } from '../../src/cluster/metrics.ts'
import { HistogramCore } from '../../src/histogram/histogram-core.ts'
import { coreFromState, coreState } from '../../src/histogram/state.ts'
import type { CoreState } from '../../src/histogram/state.ts'
import { Histogram, requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import type { NativeOptions } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'

/** Every populated bucket as [index, count], the zero bucket first. */
function buckets(h: HistogramCore): number[][] {
  const out: number[][] = [[Number.NEGATIVE_INFINITY, h.zeroCount]]
  h.forEachBucket((i, c) => out.push([i, c]))
  return out
}

/** A core as the cluster primary reads it: through its state form and the channel's structured clone. */
const viaState = (core: HistogramCore): HistogramCore => coreFromState(deserialize(serialize(coreState(core))) as CoreState, core.bounds)

/** Every worker's series merged into `primary`'s, as the cluster primary does (cluster/metrics.ts). */
function mergeInto(primary: Histogram, ...workers: Histogram[]): void {
  for (const w of workers) for (const s of w.entries()) primary.labels(...s.labelValues).core.merge(viaState(s.core))
}

/** A worker's report of its families, in full (what cluster.ts sends the primary). */
const report = (h: Histogram): WorkerMetrics => ({ ...new StateReporter().report([h], undefined), process: [] })

async function bytes(stream: AsyncGenerator<Buffer[]>): Promise<Buffer> {
  const out: Buffer[] = []
  for await (const batch of stream) for (const b of batch) out.push(Buffer.from(b))
  return Buffer.concat(out)
}

const family = (native: NativeOptions): Histogram => new Histogram({ name: 'llm_inter_token_latency_seconds', help: 'ITL.', labelNames: ['model'], buckets: [0.01, 0.1, 1, 2.5], native })

t.test('merging workers bucket by bucket equals observing everything in one process', async () => {
  const values = fc.array(fc.tuple(fc.double({ min: 0, max: 1e6, noNaN: true }), fc.integer({ min: 1, max: 50 })), { maxLength: 200 })
  fc.assert(
    fc.property(values, values, (a, b) => {
      const native = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 0 }
      const one = family(native)
      const w1 = family(native)
      const w2 = family(native)
      for (const [v, k] of a) {
        one.labels('m').observe(v, k)
        w1.labels('m').observe(v, k)
      }
      for (const [v, k] of b) {
        one.labels('m').observe(v, k)
        w2.labels('m').observe(v, k)
      }
      const primary = family(native)
      mergeInto(primary, w1, w2)
      if (a.length + b.length === 0) return primary.seriesCount === 0 || primary.labels('m').count === 0
      const got = primary.labels('m').core
      const want = one.labels('m').core
      return (
        JSON.stringify(buckets(got)) === JSON.stringify(buckets(want)) &&
        JSON.stringify(Array.from(got.classic ?? [])) === JSON.stringify(Array.from(want.classic ?? [])) &&
        got.count === want.count &&
        got.schema === want.schema &&
        got.min === want.min &&
        got.max === want.max
      )
    }),
  )
})

t.test('differing schemas merge at the lower one: each fine bucket lands in the coarse bucket that holds it', async (t) => {
  const fine = new HistogramCore({ schema: 5 })
  const coarse = new HistogramCore({ schema: 2 })
  const reference = new HistogramCore({ schema: 2 })
  for (const [v, k] of [
    [0.013, 3],
    [0.2, 1],
    [1.3, 2],
    [7, 5],
  ] as const) {
    fine.observe(v, k)
    reference.observe(v, k)
  }
  for (const v of [0.05, 1.3]) {
    coarse.observe(v)
    reference.observe(v)
  }
  const into = new HistogramCore({ schema: 2 })
  into.merge(viaState(fine))
  into.merge(viaState(coarse))
  t.equal(into.schema, 2)
  t.same(buckets(into), buckets(reference), 'the same buckets as observing all at schema 2')
  // The other way round: a schema-5 primary lowers itself to meet a schema-2 worker.
  const up = new HistogramCore({ schema: 5 })
  up.merge(viaState(fine))
  up.merge(viaState(coarse))
  t.equal(up.schema, 2)
  t.same(buckets(up), buckets(reference))
  t.equal(up.count, 13)
})

t.test('the merged series keeps the bucket limit, and the newest exemplar of each slot', async (t) => {
  const native = { schema: 8, zeroThreshold: 2 ** -128, maxBuckets: 10 }
  const w1 = family({ ...native, maxBuckets: 0 })
  const w2 = family({ ...native, maxBuckets: 0 })
  for (let j = 0; j < 30; j++) w1.labels('m').observe(1.001 * 2 ** (j / 8))
  w1.labels('m').observeWithExemplar(0.05, 1, requestIdExemplar('old'), 100)
  w2.labels('m').observeWithExemplar(0.06, 1, requestIdExemplar('new'), 200)
  const primary = family(native)
  mergeInto(primary, w1, w2)
  const s = primary.labels('m')
  t.ok(s.core.bucketCount <= 10, `${s.core.bucketCount} buckets within the limit of 10 (schema ${s.core.schema})`)
  t.equal(s.count, 32)
  const cluster = new ClusterMetrics(async () => ({ reports: [w1, w2].map(report), workerIds: [1, 2] }))
  const text = (await bytes(cluster.exposition(true))).toString()
  t.match(text, /_bucket\{model="m",le="0.1"\} 2 # \{request_id="new"\}/, 'the later exemplar of the (0.01, 0.1] slot wins')
  t.notMatch(text, /request_id="old"/)
})

t.test("the cluster primary that merges its workers' histogram states serves the protobuf a single process would", async (t) => {
  const native = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }
  const single = new MetricsRegistry({ processMetrics: false, protobuf: true })
  const one = family(native)
  single.register(one)
  const workers = [family(native), family(native)]
  const values: [number, number, string][] = [
    [0.02, 4, 'a'],
    [1.3, 1, 'a'],
    [0.15, 2, 'b'],
    [0.6, 3, 'a'],
  ]
  values.forEach(([v, k, model], i) => {
    one.labels(model).observe(v, k)
    workers[i % 2].labels(model).observe(v, k)
  })
  // Over IPC the states cross a structured clone (cluster-merge.test.ts sends them through one).
  const primary = new ClusterMetrics(async () => ({ reports: workers.map(report), workerIds: [1, 2] }))
  const want = await bytes((single.protobuf as () => AsyncGenerator<Buffer[]>)())
  const got = await bytes(primary.protobuf())
  t.ok(got.equals(want), 'byte for byte the same exposition')
})
