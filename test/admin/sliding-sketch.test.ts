import t from 'tap'
import { LIVE_SCHEMA, liveBucket, MIN_VALUE, RELATIVE_ACCURACY, SlidingCounter, SlidingSketch } from '../../src/admin/live/sliding-sketch.ts'
import { HistogramCore } from '../../src/histogram/histogram-core.ts'

const core = new HistogramCore({ schema: LIVE_SCHEMA })
/** The value a window reports for `v`: its bucket's representative, 0 for the zero bucket. */
const reported = (v: number): number => {
  const b = liveBucket(v)
  return b === Number.NEGATIVE_INFINITY ? 0 : core.representative(b)
}

/** The exact nearest-rank quantile of a list of values. */
const exact = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]
}

t.test('every bucket stands for its values within 0.55 %, well inside the page’s 1 %', async (t) => {
  let worst = 0
  for (let v = 1.0001e-6; v < 1e5; v *= 1.0137) worst = Math.max(worst, Math.abs(reported(v) - v) / v)
  t.ok(worst <= RELATIVE_ACCURACY + 1e-12, `worst relative error ${worst}`)
  t.ok(RELATIVE_ACCURACY < 0.0055)
  t.equal(reported(0), 0, 'zero is the zero bucket')
  t.equal(reported(MIN_VALUE / 2), 0, 'below a microsecond counts as zero')
  t.ok(Math.abs(reported(1e9) - 1e9) / 1e9 <= RELATIVE_ACCURACY, 'huge values keep their resolution')
  t.equal(reported(Number.NaN), 0, 'NaN goes to the zero bucket')
})

t.test('quantiles of a window are the exact nearest-rank quantiles to 1 %', async (t) => {
  const s = new SlidingSketch()
  const values: number[] = []
  // A deterministic spread over 1 ms … 3 s: quadratic residues mod a prime.
  for (let i = 1; i <= 1000; i++) {
    const v = 0.001 * (1 + ((i * i) % 997) * 3)
    values.push(v)
    s.observe(v, 1, 5_000 + i)
  }
  const qs = [0.5, 0.95, 0.99]
  const got = s.quantiles(0, qs, 6_000)
  qs.forEach((q, i) => {
    const want = exact(values, q)
    t.ok(Math.abs(got[i] - want) / want <= RELATIVE_ACCURACY, `p${q * 100}: ${got[i]} vs ${want}`)
  })
  t.equal(s.count(0, 6_000), 1000)
  t.equal(s.count(1, 6_000), 1000)
  t.equal(s.count(2, 6_000), 1000)
})

t.test('every quantile, walked from the bottom or the top, is the bin of the exact nearest-rank value', async (t) => {
  const s = new SlidingSketch()
  const values: number[] = []
  // Zeros (bursts) and weights, so both walks cross the zero bin and count weights.
  for (let i = 1; i <= 500; i++) {
    const v = i % 10 === 0 ? 0 : 0.001 * (1 + ((i * i) % 499) * 2)
    const k = 1 + (i % 3)
    for (let j = 0; j < k; j++) values.push(v)
    s.observe(v, k, 1_000 + i)
  }
  const qs = [0.01, 0.05, 0.1, 0.25, 0.5, 0.51, 0.75, 0.9, 0.95, 0.99, 0.999, 1]
  const got = s.quantiles(0, qs, 2_000)
  t.same(
    got,
    qs.map((q) => reported(exact(values, q))),
  )
  const zeros = new SlidingSketch()
  zeros.observe(0, 5, 0)
  t.same(zeros.quantiles(0, [0.5, 0.99], 0), [0, 0], 'a window of zeros reads 0 from both ends')
})

t.test('a weight counts as that many observations', async (t) => {
  const s = new SlidingSketch()
  s.observe(0.01, 9, 0)
  s.observe(1, 1, 0)
  const [p50, p90, p99] = s.quantiles(0, [0.5, 0.9, 0.99], 0)
  t.ok(Math.abs(p50 - 0.01) <= 0.0001)
  t.ok(Math.abs(p90 - 0.01) <= 0.0001, 'the 9th of 10 is still 10 ms')
  t.ok(Math.abs(p99 - 1) <= 0.01, 'the 10th is 1 s')
  t.equal(s.count(0, 0), 10)
  s.observe(5, 0, 0)
  s.observe(5, -1, 0)
  t.equal(s.count(0, 0), 10, 'zero and negative weights are ignored')
})

t.test('an empty window reads as NaN and zero count', async (t) => {
  const s = new SlidingSketch()
  t.same(s.quantiles(0, [0.5, 0.99], 1000), [Number.NaN, Number.NaN])
  t.equal(s.count(2, 1000), 0)
  t.throws(() => s.quantiles(3, [0.5], 1000), RangeError)
})

t.test('observations leave each window when it no longer covers their slot', async (t) => {
  const s = new SlidingSketch()
  // At 5 s (slot 0 of 10 s, slot 0 of 60 s): one value of 100 ms.
  s.observe(0.1, 1, 5_000)
  // At 65 s: one value of 1 s.
  s.observe(1, 1, 65_000)
  t.equal(s.count(0, 65_000), 2, '1 min window at 65 s: slots 0…6 of 10 s hold both')
  t.equal(s.count(0, 69_999), 2, 'still at 69.999 s (slot 6)')
  t.equal(s.count(0, 70_000), 1, 'at 70 s slot 0 left the 1-minute window')
  t.ok(Math.abs(s.quantiles(0, [0.5], 70_000)[0] - 1) <= 0.01, 'what is left is the 1 s value')
  t.equal(s.count(1, 70_000), 2, '5 min window keeps both')
  t.equal(s.count(1, 359_999), 2, 'until the end of minute 5')
  t.equal(s.count(1, 360_000), 1, 'at 6 min minute 0 left the 5-minute window')
  t.equal(s.count(2, 360_000), 2, '15 min window keeps both')
  t.equal(s.count(2, 959_999), 2)
  t.equal(s.count(2, 960_000), 1, 'at 16 min minute 0 left the 15-minute window')
  t.equal(s.count(2, 1_020_000), 0, 'at 17 min minute 1 left it too')
  t.same(s.quantiles(2, [0.5], 1_020_000), [Number.NaN])
  t.equal(s.byteLength, 0, 'nothing is held once every window is empty')
})

t.test('a long silence empties every window at once', async (t) => {
  const s = new SlidingSketch()
  for (let i = 0; i < 100; i++) s.observe(0.02, 1, i * 1000)
  t.equal(s.count(2, 100_000), 100)
  s.observe(0.5, 3, 10_000_000)
  t.equal(s.count(0, 10_000_000), 3)
  t.equal(s.count(2, 10_000_000), 3)
})

t.test('the version changes with every observation and every slot that passes', async (t) => {
  const s = new SlidingSketch()
  const v0 = s.version
  s.observe(0.1, 1, 0)
  const v1 = s.version
  t.ok(v1 > v0)
  s.advance(5_000)
  t.equal(s.version, v1, 'same slot: nothing changed')
  s.advance(10_000)
  t.ok(s.version > v1, 'a new slot changes what the windows hold')
})

t.test('memory stays bounded by the bins between the smallest and largest values', async (t) => {
  const s = new SlidingSketch()
  // 15 minutes of 100 observations a second spread over 5 ms … 500 ms.
  for (let ms = 0; ms < 900_000; ms += 10) s.observe(0.005 * 100 ** ((ms % 977) / 977), 1, ms)
  // log2(100) × 64 ≈ 425 buckets per store at schema 6, 8 bytes each; 23 slots and 3 window totals.
  t.ok(s.byteLength < 26 * 460 * 8, `${s.byteLength} bytes`)
  t.equal(s.count(2, 899_999), 90_000)
})

t.test('sliding counters sum each window and forget what left it', async (t) => {
  const c = new SlidingCounter()
  c.add(2, 0)
  c.add(3, 59_000)
  t.equal(c.sum(0, 59_000), 5)
  t.equal(c.sum(0, 70_000), 3, 'the first slot left the minute')
  t.equal(c.sum(1, 70_000), 5)
  t.equal(c.sum(2, 909_999), 5)
  t.equal(c.sum(2, 910_000), 3)
  t.equal(c.sum(2, 1_000_000), 0)
  t.equal(c.total, 5, 'the total never slides')
  c.add(1, 100_000_000)
  t.equal(c.sum(0, 100_000_000), 1, 'after a long silence only the new value is there')
})
