import t from 'tap'
import fc from 'fast-check'
import { HistogramCore } from '../../src/histogram/histogram-core.ts'
import { bucketIndex, bucketUpper } from '../../src/histogram/mapping.ts'
import { quantiles } from '../../src/histogram/quantiles.ts'

/** Every populated bucket as [index, count], the zero bucket first as ['zero', count]. */
function buckets(h: HistogramCore): (string | number)[][] {
  const out: (string | number)[][] = h.zeroCount > 0 ? [['zero', h.zeroCount]] : []
  h.forEachBucket((i, c) => out.push([i, c]))
  return out
}

t.test('bucket i at schema s holds (2^((i−1)/2^s), 2^(i/2^s)]: powers of two sit exactly on an upper edge', async (t) => {
  t.equal(bucketIndex(1, 3), 0)
  t.equal(bucketIndex(2, 3), 8)
  t.equal(bucketIndex(0.5, 3), -8)
  t.equal(bucketIndex(1.0001, 3), 1)
  t.equal(bucketIndex(4, 0), 2)
  t.equal(bucketIndex(5, 0), 3)
  t.equal(bucketIndex(5, -1), 2, 'schema −1: (4, 16] is bucket 2')
  t.equal(bucketIndex(16, -1), 2)
  for (const v of [0.0003, 0.02, 0.7, 1.3, 9, 123.4]) {
    for (const s of [-2, 0, 3, 6]) {
      const i = bucketIndex(v, s)
      t.ok(bucketUpper(i - 1, s) < v && v <= bucketUpper(i, s) * (1 + 1e-12), `${v} at schema ${s} in bucket ${i}`)
    }
  }
  t.ok(Number.isFinite(bucketIndex(Number.POSITIVE_INFINITY, 3)), 'infinity lands in the top finite bucket')
})

t.test('a weighted observation counts k observations, in the classic and the exponential buckets alike', async (t) => {
  const h = new HistogramCore({ schema: 3, bounds: Float64Array.of(0.01, 0.1, 1) })
  h.observe(0.01, 4)
  h.observe(0.05)
  h.observe(5)
  h.observe(0, 2)
  t.equal(h.observe(0.2, 0), -1, 'weight 0 is no observation')
  t.equal(h.observe(Number.NaN), -1, 'NaN is no observation')
  t.same(Array.from(h.classic as Float64Array), [6, 1, 0, 1], 'le inclusive; 0 in the first bucket')
  t.equal(h.count, 8)
  t.ok(Math.abs(h.sum - (0.04 + 0.05 + 5)) < 1e-12)
  t.equal(h.zeroCount, 2)
  t.same(buckets(h), [
    ['zero', 2],
    [bucketIndex(0.01, 3), 4],
    [bucketIndex(0.05, 3), 1],
    [bucketIndex(5, 3), 1],
  ])
  t.equal(h.min, 0)
  t.equal(h.max, 5)
  t.equal(h.bucketCount, 3)
})

t.test('past the bucket limit the resolution drops one schema at a time, as the Prometheus clients do', async (t) => {
  const h = new HistogramCore({ schema: 3, maxBuckets: 4 })
  // Five values an eighth of an octave apart: five buckets at schema 3.
  for (let j = 0; j < 5; j++) h.observe(2 ** (j / 8) * 1.01)
  t.equal(h.schema, 2, 'five buckets do not fit four: schema 2 merges pairs')
  t.ok(h.bucketCount <= 4)
  t.equal(h.count, 5)
  let total = 0
  h.forEachBucket((_i, c) => (total += c))
  t.equal(total, 5, 'no count is lost')
})

t.test('the bucket limit holds whatever is observed, and nothing is lost', async () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.double({ min: 0, max: 1e12, noNaN: true }), fc.integer({ min: 1, max: 1000 })), { maxLength: 400 }),
      fc.integer({ min: 1, max: 40 }),
      fc.integer({ min: -4, max: 8 }),
      (values, limit, schema) => {
        const h = new HistogramCore({ schema, maxBuckets: limit })
        let count = 0
        for (const [v, w] of values) {
          h.observe(v, w)
          count += w
        }
        let seen = h.zeroCount
        h.forEachBucket((_i, c) => (seen += c))
        return (h.bucketCount <= limit || h.schema === -4) && seen === count && h.count === count
      },
    ),
  )
})

/** Values and weights, as a worker would observe them. */
const observations = fc.array(fc.tuple(fc.oneof(fc.constant(0), fc.double({ min: 1e-7, max: 1e4, noNaN: true })), fc.integer({ min: 1, max: 50 })), { maxLength: 200 })

t.test('merging equals observing in one histogram, across schemas (the lower one wins)', async () => {
  fc.assert(
    fc.property(observations, observations, fc.integer({ min: 0, max: 8 }), fc.integer({ min: 0, max: 8 }), (a, b, sa, sb) => {
      const bounds = Float64Array.of(0.001, 0.1, 10)
      const x = new HistogramCore({ schema: sa, bounds, maxBuckets: 0 })
      const y = new HistogramCore({ schema: sb, bounds, maxBuckets: 0 })
      const one = new HistogramCore({ schema: Math.min(sa, sb), bounds, maxBuckets: 0 })
      for (const [v, w] of a) {
        x.observe(v, w)
        one.observe(v, w)
      }
      for (const [v, w] of b) {
        y.observe(v, w)
        one.observe(v, w)
      }
      x.merge(y)
      return (
        x.schema === one.schema &&
        JSON.stringify(buckets(x)) === JSON.stringify(buckets(one)) &&
        JSON.stringify(Array.from(x.classic as Float64Array)) === JSON.stringify(Array.from(one.classic as Float64Array)) &&
        x.count === one.count &&
        Math.abs(x.sum - one.sum) <= 1e-9 * Math.max(1, one.sum)
      )
    }),
  )
})

t.test('subtracting what was merged in leaves what was there', async (t) => {
  const a = new HistogramCore({ schema: 5 })
  const b = new HistogramCore({ schema: 5 })
  for (const v of [0.01, 0.02, 0.5]) a.observe(v, 2)
  for (const v of [0.02, 3, 0]) b.observe(v, 3)
  const before = buckets(a)
  a.merge(b)
  t.equal(a.count, 15)
  a.subtract(b)
  t.same(buckets(a), before)
  t.equal(a.count, 6)
  a.subtract(a)
  t.equal(a.count, 0)
  t.equal(a.byteLength, 0, 'an emptied histogram holds no buckets')
})

t.test('quantiles are the nearest-rank bucket, within half a bucket of the exact value', async (t) => {
  const h = new HistogramCore({ schema: 3, maxBuckets: 0 })
  const values: number[] = []
  for (let i = 1; i <= 1000; i++) {
    const v = 0.001 * (1 + ((i * i) % 997))
    values.push(v)
    h.observe(v)
  }
  values.sort((a, b) => a - b)
  const qs = [0.01, 0.5, 0.9, 0.99, 1]
  const out = new Array<number>(qs.length)
  quantiles(h, qs, out)
  const base = 2 ** (1 / 8)
  qs.forEach((q, i) => {
    const exact = values[Math.max(0, Math.ceil(q * values.length) - 1)]
    t.ok(Math.abs(out[i] - exact) / exact <= (base - 1) / (base + 1) + 1e-12, `p${q * 100}: ${out[i]} vs ${exact}`)
  })
  const empty = new HistogramCore({ schema: 3 })
  quantiles(empty, [0.5], out)
  t.ok(Number.isNaN(out[0]), 'an empty histogram has no quantile')
})

t.test('a schema outside Prometheus’s range is refused', async (t) => {
  t.throws(() => new HistogramCore({ schema: 9 }), RangeError)
  t.throws(() => new HistogramCore({ schema: 2.5 }), RangeError)
})
