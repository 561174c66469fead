import t from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { reconcileTokens } from '../../src/timing/request-timing.ts'
import { measure } from '../../src/timing/measurement.ts'
import type { ExchangeFacts } from '../../src/timing/measurement.ts'

// Reconciling with a reported count must cost at most a pass over the chunks, whatever the count:
// a loop sized by the count (or by its float rounding residue) froze the process.

const ones = (n: number): ChunkLog => {
  const l = new ChunkLog()
  for (let i = 0; i < n; i++) l.add(i * 10, 1, MarkKind.text, false)
  return l
}

t.test('reconciling a few chunks with a huge count takes one pass, whatever the rounding leaves', async (t) => {
  // 8 one-token chunks and 2^53 - 1 left a float residue of about 2^29 leftover tokens, one loop turn each.
  for (const n of [1, 6, 7, 8, 12]) {
    for (const target of [Number.MAX_SAFE_INTEGER, 2 ** 52 + 7, 1e15 + 3]) {
      const l = ones(n)
      t.ok(reconcileTokens(l, target), `${n} chunks, ${target}`)
      for (let i = 0; i < n; i++) t.ok(l.tokens(i) >= 1)
    }
  }
  t.notOk(reconcileTokens(ones(8), 1e30), 'a count beyond the safe integers is no count: left as estimated')
  t.notOk(reconcileTokens(ones(8), Number.POSITIVE_INFINITY))
})

t.test('a usage figure that is no count is not reported: the stream count stands and a parse error is noted', async (t) => {
  for (const output of [1e30, -5, 1.5, Number.POSITIVE_INFINITY, Number.NaN, 2 ** 60]) {
    const facts: ExchangeFacts = {
      tReq: 0,
      tEnd: 100,
      tHeaders: 1,
      statusCode: 200,
      chunks: ones(8),
      summary: { usage: { output, input: 3 } },
      clientGone: false,
      failure: undefined,
      stallSeconds: 1,
    }
    const m = measure(facts)
    t.equal(m.outputTokens, 8, `${output}: the streamed 8 tokens`)
    t.equal(m.outputSource, 'estimate')
    t.equal(m.inputTokens, 3, 'a valid input count is kept')
    t.match(m.parseError, /not a token count/)
  }
})
