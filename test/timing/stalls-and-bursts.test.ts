import t from 'tap'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { countStalls, itlQuantiles, summarize, totalTokens } from '../../src/timing/request-timing.ts'

const requestItlP99 = (log: ChunkLog): number | undefined => itlQuantiles(log, [0.99])[0]

/** A log from [at_ms, tokens, kind?] marks. */
function logOf(marks: [number, number, MarkKind?][]): ChunkLog {
  const log = new ChunkLog()
  for (const [at, k, kind] of marks) log.add(at, k, kind ?? MarkKind.text, false)
  return log
}

t.test('stalls are the gaps strictly longer than the threshold', async (t) => {
  // Gaps: 20, 1500, 20, 0, 1000 (exactly the threshold: not a stall), 1001.
  const log = logOf([
    [100, 1],
    [120, 1],
    [1620, 1],
    [1640, 4],
    [1640, 8],
    [2640, 1],
    [3641, 1],
  ])
  t.equal(countStalls(log, 1), 2)
  t.equal(countStalls(log, 0.01), 5, 'every gap above 10 ms: all but the burst')
  t.equal(countStalls(log, 5), 0)
  t.equal(countStalls(logOf([[5, 3]]), 0.001), 0, 'one chunk has no gap')
  t.equal(summarize(0, 4000, log).maxGap, 1.5, 'the longest gap is the stall')
})

t.test('the request ITL P99 is the token-weighted nearest-rank quantile of the log line', async (t) => {
  // Chunk 2: 20 ms for 1 token; chunk 3: 300 ms for 10 tokens (30 ms each); chunk 4: 100 ms for 1 token.
  const log = logOf([
    [0, 1],
    [20, 1],
    [320, 10],
    [420, 1],
  ])
  t.equal(requestItlP99(log), 0.1, 'below 100 observations the P99 is the largest g/k')
  t.same(itlQuantiles(log, [0.5]), [0.03], 'the median is the burst chunk, weighted by its 10 tokens')

  // 199 tokens at 10 ms and one at 500 ms: rank 0.99 × 200 = 198 falls on the 10 ms ones.
  const marks: [number, number][] = [[0, 1]]
  let at = 0
  for (let i = 0; i < 199; i++) {
    at += 10
    marks.push([at, 1])
  }
  marks.push([at + 500, 1])
  t.equal(requestItlP99(logOf(marks)), 0.01, 'one slow token in 200 is above the P99')

  t.equal(requestItlP99(logOf([[10, 5]])), undefined, 'a single chunk has no ITL')
})

t.test('tokens per chunk visits every content chunk, the first included', async (t) => {
  const log = logOf([
    [0, 2],
    [10, 1],
    [20, 8],
    [20, 4, MarkKind.reasoning],
  ])
  const seen: number[] = []
  for (let i = 0; i < log.count; i++) seen.push(log.tokens(i))
  t.same(seen, [2, 1, 8, 4])
  t.equal(totalTokens(log), 15)
})

t.test('time to first output token skips reasoning chunks', async (t) => {
  const log = logOf([
    [100, 3, MarkKind.reasoning],
    [400, 3, MarkKind.reasoning],
    [900, 1, MarkKind.text],
  ])
  const timing = summarize(0, 1000, log)
  t.equal(timing.ttft, 0.1)
  t.equal(timing.ttfot, 0.9)
  t.equal(summarize(0, 1000, logOf([[50, 1, MarkKind.reasoning]])).ttfot, undefined, 'only reasoning: no output token')
  t.equal(summarize(0, 1000, logOf([[50, 1, MarkKind.tool]])).ttfot, 0.05, 'a tool call is output')
})
