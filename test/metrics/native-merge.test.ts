import t from 'tap'
import fc from 'fast-check'
import { HistogramCore, mergeHistogramState } from '../../src/metrics/core/histogram-core.ts'
import { Histogram, requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import type { NativeOptions } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'

/** Every populated bucket as [index, count], the zero bucket first. */
function buckets(h: HistogramCore): number[][] {
  const out: number[][] = [[Number.NEGATIVE_INFINITY, h.zeroCount]]
  h.forEachBucket((i, c) => out.push([i, c]))
  return out
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
      primary.mergeStates(JSON.parse(JSON.stringify(w1.states())))
      primary.mergeStates(JSON.parse(JSON.stringify(w2.states())))
      if (a.length + b.length === 0) return primary.seriesCount === 0 || primary.labels('m').count === 0
      const got = primary.labels('m').core
      const want = one.labels('m').core
      return (
        JSON.stringify(buckets(got)) === JSON.stringify(buckets(want)) &&
        JSON.stringify(Array.from(got.classic ?? [])) === JSON.stringify(Array.from(want.classic ?? [])) &&
        got.count === want.count &&
        got.schema === want.schema
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
  const into = HistogramCore.like(coarse)
  mergeHistogramState(into, fine.toState())
  mergeHistogramState(into, coarse.toState())
  t.equal(into.schema, 2)
  t.same(buckets(into), buckets(reference), 'the same buckets as observing all at schema 2')
  // The other way round: a schema-5 primary lowers itself to meet a schema-2 worker.
  const up = new HistogramCore({ schema: 5 })
  mergeHistogramState(up, fine.toState())
  mergeHistogramState(up, coarse.toState())
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
  primary.mergeStates(w1.states())
  primary.mergeStates(w2.states())
  const s = primary.labels('m')
  t.ok(s.core.bucketCount <= 10, `${s.core.bucketCount} buckets within the limit of 10 (schema ${s.core.schema})`)
  t.equal(s.count, 32)
  t.equal(s.exemplars?.[1]?.labels, 'request_id="new"', 'the later exemplar of the (0.01, 0.1] slot wins')
})

t.test("a primary's registry that merges its workers' histogram states serves the protobuf a single process would", async (t) => {
  const native = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }
  const registry = (): { r: MetricsRegistry; h: Histogram } => {
    const r = new MetricsRegistry({ processMetrics: false, protobuf: true })
    const h = family(native)
    r.register(h)
    return { r, h }
  }
  const single = registry()
  const workers = [registry(), registry()]
  const values: [number, number, string][] = [
    [0.02, 4, 'a'],
    [1.3, 1, 'a'],
    [0.15, 2, 'b'],
    [0.6, 3, 'a'],
  ]
  values.forEach(([v, k, model], i) => {
    single.h.labels(model).observe(v, k)
    workers[i % 2].h.labels(model).observe(v, k)
  })
  const primary = registry()
  // Over IPC the states travel as JSON (structured clone keeps the same plain data).
  for (const w of workers) primary.r.mergeHistogramStates(JSON.parse(JSON.stringify(w.r.histogramStates())))
  const bytes = async (r: MetricsRegistry): Promise<Buffer> => {
    const out: Buffer[] = []
    const stream = r.protobuf
    if (stream === undefined) throw new Error('no protobuf')
    for await (const batch of stream()) for (const b of batch) out.push(Buffer.from(b))
    return Buffer.concat(out)
  }
  const want = await bytes(single.r)
  const got = await bytes(primary.r)
  t.ok(got.equals(want), 'byte for byte the same exposition')
})
