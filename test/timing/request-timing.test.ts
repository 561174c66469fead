import t from 'tap'
import type { Test } from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { itlQuantiles, reconcileTokens, summarize } from '../../src/timing/request-timing.ts'
import { measure } from '../../src/timing/measurement.ts'
import { observationsOf } from '../helpers/observe.ts'
import { defined } from '../helpers/defined.ts'

/** A log from [ms, tokens] marks (kind text, estimated counts unless said). */
function log(marks: [number, number, MarkKind?][], exact = false): ChunkLog {
  const l = new ChunkLog()
  for (const [at, k, kind] of marks) l.add(at, k, kind ?? MarkKind.text, exact)
  return l
}

/** g_j (seconds) and k_j of each content chunk j ≥ 2, as the contract defines them. */
function forEachGap(l: ChunkLog, observe: (gap: number, tokens: number) => void): void {
  for (let i = 1; i < l.count; i++) observe((l.at(i) - l.at(i - 1)) / 1000, l.tokens(i))
}

/** ITL observations as the metrics layer makes them: k_j of g_j/k_j for j ≥ 2. */
function itl(l: ChunkLog): { sum: number; count: number; values: number[] } {
  const values: number[] = []
  forEachGap(l, (gap, k) => {
    for (let i = 0; i < k; i++) values.push(gap / k)
  })
  return { sum: values.reduce((a, b) => a + b, 0), count: values.length, values }
}

const close = (t: Test, got: number | undefined, want: number, msg: string) => t.ok(got !== undefined && Math.abs(got - want) < 1e-9, `${msg}: ${got} ≈ ${want}`)

t.test('a steady stream of one-token chunks: TTFT, TPOT, ITL and TPS by hand', async (t) => {
  // t_req = 0; chunks at 100, 110, 120, 130 ms, one token each; t_end = 135 ms.
  const l = log([
    [100, 1],
    [110, 1],
    [120, 1],
    [130, 1],
  ])
  const s = summarize(0, 135, l)
  close(t, s.ttft, 0.1, 'TTFT')
  close(t, s.e2e, 0.135, 'E2E')
  t.equal(s.tokens, 4)
  t.equal(s.firstTokens, 1)
  close(t, s.decode, 0.03, 't_last − t_first')
  close(t, s.tpot, 0.01, 'TPOT = 30 ms / 3')
  close(t, s.tps, 4 / 0.135, 'TPS = N / E2E')
  close(t, s.maxGap, 0.01, 'max gap')
  const i = itl(l)
  t.equal(i.count, 3, 'ITL count = N − k1')
  close(t, i.sum, 0.03, 'ITL sum = t_last − t_first')
  // with k1 = 1, TPOT equals (E2E − TTFT)/(N − 1) when the last chunk ends the response
  close(t, summarize(0, 130, l).tpot, (0.13 - 0.1) / 3, 'TPOT = (E2E − TTFT)/(N − 1)')
})

t.test('a burst chunk of several tokens gives k observations of g/k', async (t) => {
  // chunk 2 carries 4 tokens after 40 ms: 4 observations of 10 ms each.
  const l = log([
    [50, 1],
    [90, 4],
    [100, 1],
  ])
  const i = itl(l)
  t.equal(i.count, 5, 'N − k1 = 6 − 1')
  t.same(
    i.values.map((v) => Math.round(v * 1e6) / 1e6),
    [0.01, 0.01, 0.01, 0.01, 0.01],
    'the 4-token chunk spreads its 40 ms gap over its 4 tokens',
  )
  close(t, i.sum, 0.05, 'ITL sum = t_last − t_first')
  const gaps: number[] = []
  forEachGap(l, (g) => gaps.push(g))
  t.same(gaps.length, 2, 'inter-chunk latency observes each gap once')
  close(t, gaps[0], 0.04, 'the burst is one 40 ms gap to the reader')
  close(t, summarize(0, 100, l).tpot, 0.05 / 5, 'TPOT')
})

t.test('events arriving in one read are a burst: gap 0', async (t) => {
  const l = log([
    [10, 1],
    [30, 1],
    [30, 1],
    [30, 1],
  ])
  const gaps: number[] = []
  forEachGap(l, (g) => gaps.push(g))
  t.same(
    gaps.map((g) => Math.round(g * 1e6) / 1e6),
    [0.02, 0, 0],
  )
  t.equal(itl(l).count, 3)
})

t.test('a first chunk of several tokens is TTFT, not ITL: count is N − k1', async (t) => {
  const l = log([
    [200, 5],
    [220, 1],
    [240, 2],
  ])
  const s = summarize(0, 250, l)
  t.equal(s.tokens, 8)
  t.equal(s.firstTokens, 5)
  close(t, s.tpot, 0.04 / 3, 'TPOT = (t_last − t_first)/(N − k1)')
  t.equal(itl(l).count, 3)
})

t.test('a one-token answer has TTFT and TPS but no TPOT, ITL or gap', async (t) => {
  const l = log([[80, 1]])
  const s = summarize(0, 90, l)
  close(t, s.ttft, 0.08, 'TTFT')
  t.equal(s.tpot, undefined)
  t.equal(s.maxGap, undefined)
  close(t, s.tps, 1 / 0.09, 'TPS')
  t.equal(itl(l).count, 0)
})

t.test('no content: E2E only', async (t) => {
  const s = summarize(5, 25, new ChunkLog())
  close(t, s.e2e, 0.02, 'E2E')
  t.equal(s.ttft, undefined)
  t.equal(s.tps, undefined)
  t.equal(s.chunks, 0)
})

t.test('reasoning chunks count for TTFT; the first visible chunk gives the time to first output token', async (t) => {
  const l = log([
    [100, 1, MarkKind.reasoning],
    [150, 1, MarkKind.reasoning],
    [400, 1, MarkKind.text],
  ])
  const s = summarize(0, 410, l)
  close(t, s.ttft, 0.1, 'TTFT includes reasoning')
  close(t, s.ttfot, 0.4, 'first output token')
})

t.test('the classic two-request example: request-weighted TPOT vs token-weighted ITL', async (t) => {
  // A: 100 inter-token gaps of 10 ms; B: 2 gaps of 50 ms (one token per chunk).
  const a = log(Array.from({ length: 101 }, (_, i) => [100 + i * 10, 1] as [number, number]))
  const b = log([
    [100, 1],
    [150, 1],
    [200, 1],
  ])
  const tpots = [defined(summarize(0, 1100, a).tpot, 'TPOT A'), defined(summarize(0, 200, b).tpot, 'TPOT B')]
  close(t, tpots[0], 0.01, 'TPOT A')
  close(t, tpots[1], 0.05, 'TPOT B')
  close(t, (tpots[0] + tpots[1]) / 2, 0.03, 'mean TPOT over requests = 30 ms')
  const ia = itl(a)
  const ib = itl(b)
  const mean = (ia.sum + ib.sum) / (ia.count + ib.count)
  close(t, mean, 1.1 / 102, 'token-weighted ITL mean = 1100 ms / 102 tokens ≈ 10.8 ms')
  t.ok(Math.abs(mean - 0.0108) < 0.0001)
})

t.test('per-request ITL quantiles weigh each gap by its tokens', async (t) => {
  const l = log([
    [0, 1],
    [10, 1],
    [20, 1],
    [120, 1],
    [130, 10],
  ])
  const [p50, p99] = itlQuantiles(l, [0.5, 0.99])
  close(t, p50, 0.001, 'ten 1 ms observations from the burst dominate the median')
  close(t, p99, 0.1, 'the 100 ms stall is the P99')
  t.same(itlQuantiles(log([[0, 1]]), [0.5]), [undefined])
})

t.test('reconciling with the provider usage scales estimates to the reported total', async (t) => {
  const l = log([
    [0, 2],
    [10, 1],
    [20, 1],
    [30, 4],
  ])
  t.ok(reconcileTokens(l, 12))
  const ks = [0, 1, 2, 3].map((i) => l.tokens(i))
  t.equal(
    ks.reduce((a, b) => a + b, 0),
    12,
    'Σ k_j = usage',
  )
  t.ok(
    ks.every((k) => k >= 1),
    'every chunk keeps at least one token',
  )
  t.ok(ks[3] > ks[1], 'larger chunks keep the larger share')
  t.notOk(reconcileTokens(l, 12), 'already equal: unchanged')
  t.notOk(reconcileTokens(l, 3), 'fewer tokens than chunks: left as estimated')
  const ones = log([
    [0, 1],
    [10, 1],
  ])
  t.ok(reconcileTokens(ones, 5))
  t.equal(ones.tokens(0) + ones.tokens(1), 5)
})

t.test('the chunk log grows past its first capacity without losing marks', async (t) => {
  const l = new ChunkLog()
  for (let i = 0; i < 1000; i++) l.add(i, (i % 3) + 1, MarkKind.tool, true)
  t.equal(l.count, 1000)
  t.equal(l.at(999), 999)
  t.equal(l.tokens(998), (998 % 3) + 1)
  t.equal(l.kind(500), MarkKind.tool)
  t.ok(l.allExact)
})

t.test('folding runs of equal chunks gives the same gaps and token counts, in order', async (t) => {
  // Bursts (several chunks in one read: gap 0), repeats, multi-token chunks, and a last run.
  const cases: [number, number][][] = [
    [[5, 1]],
    [
      [5, 1],
      [5, 1],
      [5, 1],
      [9, 2],
      [9, 1],
      [9, 1],
      [12, 1],
      [15, 1],
      [18, 1],
      [18, 3],
    ],
    [
      [0, 1],
      [10, 1],
      [20, 1],
      [30, 1],
    ],
    [
      [1, 2],
      [1, 2],
      [1, 2],
      [1, 2],
    ],
  ]
  let seed = 7
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    return seed % n
  }
  for (let c = 0; c < 50; c++) {
    const marks: [number, number][] = []
    let at = 0
    for (let i = 0; i < 1 + rnd(40); i++) {
      at += rnd(3) * 5
      marks.push([at, 1 + rnd(2)])
    }
    cases.push(marks)
  }
  for (const marks of cases) {
    const l = log(marks)
    const each: [number, number][] = []
    forEachGap(l, (g, k) => each.push([g, k]))
    // The recording policy's runs, unfolded, are the chunks one by one.
    const o = observationsOf(measure({ tReq: 0, tEnd: 1000, tHeaders: undefined, statusCode: 200, failure: undefined, clientGone: false, chunks: l, summary: {}, stallSeconds: 1 }))
    const folded: [number, number][] = []
    for (let r = 0; r < o.gaps.count; r++) {
      t.ok(o.gaps.times[r] >= 1)
      for (let i = 0; i < o.gaps.times[r]; i++) folded.push([o.gaps.seconds[r], o.gaps.tokens[r]])
    }
    t.same(folded, each, `gaps of ${JSON.stringify(marks)}`)
    const tokens: number[] = []
    for (let i = 0; i < l.count; i++) tokens.push(l.tokens(i))
    const foldedTokens: number[] = []
    for (let r = 0; r < o.chunkTokens.count; r++) foldedTokens.push(...Array.from({ length: o.chunkTokens.times[r] }, () => o.chunkTokens.tokens[r]))
    t.same(foldedTokens, tokens, `tokens of ${JSON.stringify(marks)}`)
  }
})
