import t from 'tap'
import fc from 'fast-check'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { itlQuantiles } from '../../src/timing/request-timing.ts'

/** The definition, written plainly: weighted values sorted, the first whose running weight reaches q × total. */
function reference(log: ChunkLog, qs: readonly number[]): (number | undefined)[] {
  const values: { v: number; w: number }[] = []
  let total = 0
  for (let i = 1; i < log.count; i++) {
    const k = log.tokens(i)
    if (k === 0) continue
    values.push({ v: ((log.at(i) - log.at(i - 1)) * (1 / 1000)) / k, w: k })
    total += k
  }
  if (total === 0) return qs.map(() => undefined)
  values.sort((a, b) => a.v - b.v)
  return qs.map((q) => {
    let seen = 0
    for (const { v, w } of values) {
      seen += w
      if (seen >= q * total) return v
    }
    return values[values.length - 1].v
  })
}

t.test('per-request ITL quantiles match the weighted definition on any log', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.double({ min: 0, max: 500, noNaN: true }), fc.integer({ min: 0, max: 12 })), { minLength: 0, maxLength: 60 }), (marks) => {
      const log = new ChunkLog()
      let at = 0
      for (const [gap, k] of marks) {
        at += gap
        log.add(at, k, MarkKind.text, false)
      }
      const qs = [0, 0.01, 0.5, 0.9, 0.99, 1]
      t.same(itlQuantiles(log, qs), reference(log, qs))
    }),
    { numRuns: 300 },
  )
})

t.test('a log with no tokens after the first chunk has no ITL quantiles', async (t) => {
  const log = new ChunkLog()
  log.add(0, 3, MarkKind.text, false)
  log.add(10, 0, MarkKind.text, false)
  t.same(itlQuantiles(log, [0.5, 0.99]), [undefined, undefined])
})

t.test('quantiles asked in any order agree with the definition on long logs full of equal gaps', async (t) => {
  // Selection instead of a sort: equal values (a burst of chunks in one read) and any order of qs.
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.constantFrom(0, 0, 0, 1, 2.5, 10), fc.integer({ min: 0, max: 4 })), { minLength: 0, maxLength: 3000 }),
      fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 5 }),
      (marks, qs) => {
        const log = new ChunkLog()
        let at = 0
        for (const [gap, k] of marks) {
          at += gap
          log.add(at, k, MarkKind.text, false)
        }
        t.same(itlQuantiles(log, qs), reference(log, qs))
      },
    ),
    { numRuns: 200 },
  )
})

t.test('a request with more weighted gaps than the reused array holds agrees with the definition, and so does a small one after it', async (t) => {
  const big = new ChunkLog()
  let at = 0
  big.add(at, 1, MarkKind.text, false)
  for (let i = 0; i < 40; i++) {
    at += 1 + (i % 7)
    big.add(at, 2000 + i, MarkKind.text, false)
  }
  const qs = [0.5, 0.99]
  t.same(itlQuantiles(big, qs), reference(big, qs), '80,000 weighted gaps')
  const small = new ChunkLog()
  small.add(0, 1, MarkKind.text, false)
  small.add(3, 1, MarkKind.text, false)
  small.add(4, 2, MarkKind.text, false)
  t.same(itlQuantiles(small, qs), reference(small, qs))
})
