import t from 'tap'
import { ChunkLog, MarkKind, MAX_MARK_TOKENS } from '../../src/timing/chunk-log.ts'

const KINDS = [MarkKind.text, MarkKind.reasoning, MarkKind.tool] as const

t.test('marks read back as written, to the microsecond, across page boundaries', async (t) => {
  const log = new ChunkLog()
  const t0 = 123456.789012 // a performance.now() far from zero
  const n = 5000
  for (let i = 0; i < n; i++) log.add(t0 + i * 7.3125 + (i % 7) * 0.001, (i % 50) + 1, KINDS[i % 3], true)
  t.equal(log.count, n)
  t.equal(log.allExact, true)
  let worst = 0
  let wrong = 0
  for (let i = 0; i < n; i++) {
    worst = Math.max(worst, Math.abs(log.at(i) - (t0 + i * 7.3125 + (i % 7) * 0.001)))
    if (log.tokens(i) !== (i % 50) + 1 || log.kind(i) !== KINDS[i % 3]) wrong++
  }
  t.ok(worst <= 0.0005, `times within half a microsecond (worst ${worst} ms)`)
  t.equal(wrong, 0, 'every token count and kind as written')
  t.equal(log.at(0), t0, 'the first mark of a page is exact')
})

t.test('replacing a token count keeps the mark’s kind', async (t) => {
  const log = new ChunkLog()
  for (let i = 0; i < 2100; i++) log.add(i, 1, KINDS[i % 3], false)
  for (let i = 0; i < 2100; i++) log.setTokens(i, i * 3)
  let wrong = 0
  for (let i = 0; i < 2100; i++) if (log.tokens(i) !== i * 3 || log.kind(i) !== KINDS[i % 3]) wrong++
  t.equal(wrong, 0)
  t.equal(log.allExact, false)
})

t.test('a token count beyond 2^30 − 1 is capped instead of corrupting the kind', async (t) => {
  const log = new ChunkLog()
  log.add(1, 2 ** 31 + 5, MarkKind.text, true)
  log.add(2, 7, MarkKind.tool, true)
  log.setTokens(1, 2 ** 32 + 9)
  t.equal(log.tokens(0), MAX_MARK_TOKENS)
  t.equal(log.kind(0), MarkKind.text)
  t.equal(log.tokens(1), MAX_MARK_TOKENS)
  t.equal(log.kind(1), MarkKind.tool)
})

t.test('a 10-minute stream at 100 chunks/s costs 8 bytes a chunk, plus at most one page', async (t) => {
  const log = new ChunkLog()
  const n = 10 * 60 * 100
  for (let i = 0; i < n; i++) log.add(1000 + i * 10, 1, MarkKind.text, false)
  t.equal(log.count, n)
  t.ok(log.byteLength <= 8 * n + 8 * 1024, `${log.byteLength} bytes for ${n} marks`)
  t.equal(log.at(n - 1), 1000 + (n - 1) * 10)
})

t.test('a new log holds 8 marks before it allocates more', async (t) => {
  const log = new ChunkLog()
  log.add(1, 1, MarkKind.text, true)
  t.equal(log.byteLength, 8 * 8)
  for (let i = 1; i < 9; i++) log.add(1 + i, 1, MarkKind.text, true)
  t.equal(log.byteLength, 16 * 8, 'the first page doubles')
})

t.test('a page spanning more than 71 minutes keeps exact times', async (t) => {
  const log = new ChunkLog()
  const times = [5, 6.5, 5 + 72 * 60_000, 5 + 72 * 60_000 + 0.25]
  for (let i = 0; i < 1030; i++) times.push(times[times.length - 1] + 3)
  for (const at of times) log.add(at, 2, MarkKind.reasoning, false)
  let wrong = 0
  for (let i = 0; i < times.length; i++) if (log.at(i) !== times[i] || log.tokens(i) !== 2 || log.kind(i) !== MarkKind.reasoning) wrong++
  t.equal(wrong, 0)
  t.ok(log.byteLength <= 12 * times.length + 12 * 1024, 'exact times cost 12 bytes a mark')
})

t.test('a clock going backwards keeps exact times', async (t) => {
  const log = new ChunkLog()
  const times = [100, 101.5, 99.25, 102]
  for (const at of times) log.add(at, 1, MarkKind.text, true)
  t.same(
    [0, 1, 2, 3].map((i) => log.at(i)),
    times,
  )
})
