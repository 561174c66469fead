import t from 'tap'
import { countTokens as o200k } from 'gpt-tokenizer/encoding/o200k_base'
import { counterFor, READ_BUDGET_MS, ReadBudget } from '../../src/tokens/tokenizer.ts'
import { fixture, ssePayloads } from '../helpers/split-feed.ts'

// Counting is bounded per read: text is counted in slices, exactly while the read's budget of
// clock time lasts, then estimated linearly. Time is an input: a clock that does not move counts
// everything exactly; a clock that moves with each call spends the budget.

const count = counterFor('o200k_base')
const ENGLISH = 'The proxy forwards bytes unchanged, and on a copy it times each chunk and counts tokens. '.repeat(40)
const JSON_ARGS = JSON.stringify({ location: 'San Francisco, CA', unit: 'celsius', days: [1, 2, 3], note: 'x'.repeat(30) }).repeat(10)
const CODE = 'function add(a, b) {\n  return a + b\n}\n\nconst xs = [1, 2, 3].map((x) => add(x, 1))\n'.repeat(20)

t.test('on a clock that does not move, counting in slices gives the whole text count', async (t) => {
  for (const [name, text] of [
    ['English', ENGLISH],
    ['JSON arguments', JSON_ARGS],
    ['code', CODE],
  ] as const) {
    const budget = new ReadBudget(count, () => 0)
    budget.newRead()
    t.equal(budget.count(text), o200k(text), name)
    t.equal(budget.estimated, 0, `${name}: nothing estimated`)
  }
})

t.test("a recorded stream's deltas count the same through the budget as alone", async (t) => {
  const budget = new ReadBudget(count, () => 0)
  budget.newRead()
  let n = 0
  for (const p of ssePayloads(fixture('openai/chat-tool-call-deltas-usage-chunk.sse'))) {
    const delta = (p as { choices?: { delta?: { content?: string; tool_calls?: { function?: { arguments?: string } }[] } }[] }).choices?.[0]?.delta
    const d = delta?.content ?? delta?.tool_calls?.[0]?.function?.arguments
    if (typeof d === 'string' && d.length > 0) {
      t.equal(budget.count(d), count(d))
      n++
    }
  }
  t.ok(n > 0)
})

t.test('once the read has spent its budget, the rest is estimated with the tokens per character so far', async (t) => {
  let clock = 0
  const seen: number[] = []
  // Each call of the tokenizer takes a tenth of a millisecond on this clock.
  const slow = (text: string): number => {
    clock += 0.1
    seen.push(text.length)
    return count(text)
  }
  const budget = new ReadBudget(slow, () => clock)
  budget.newRead()
  const text = ENGLISH.repeat(4)
  const n = budget.count(text)
  const exact = o200k(text)
  t.ok(Math.max(...seen) <= 97, 'the tokenizer never sees more than a slice')
  t.ok(seen.length <= Math.ceil(READ_BUDGET_MS / 0.1) + 1, `at most the budget's worth of slices (${seen.length})`)
  t.ok(budget.estimated > 0, 'the rest was estimated, and said so')
  t.ok(Math.abs(n - exact) / exact < 0.05, `the estimate is close: ${n} for ${exact}`)
  budget.newRead()
  const before = seen.length
  t.equal(budget.count(' again'), count(' again'), 'a new read counts exactly again')
  t.equal(seen.length, before + 1)
  t.equal(budget.count(''), 0, 'no text, no tokens')
})

t.test('a pause inside one slice (the process preempted for 5 ms) does not turn the rest of a short read into estimates', async (t) => {
  let clock = 0
  let calls = 0
  // The first call of the tokenizer is paused for 5 ms on this clock; the others take no time.
  const paused = (text: string): number => {
    if (calls++ === 0) clock += 5
    return count(text)
  }
  const budget = new ReadBudget(paused, () => clock)
  budget.newRead()
  const texts = ['Hi', ' there', ' friend']
  t.same(
    texts.map((text) => budget.count(text)),
    texts.map((text) => count(text)),
    'every text counted exactly',
  )
  t.equal(budget.estimated, 0, 'nothing estimated')
})

t.test('a run of 8,192 letters with no space or punctuation is counted in bounded pieces', async (t) => {
  const seen: number[] = []
  const spy = (text: string): number => {
    seen.push(text.length)
    return o200k(text)
  }
  let cjk = ''
  for (let i = 0; i < 8192; i++) cjk += String.fromCharCode(0x4e00 + ((i * 7919) % 20000))
  const budget = new ReadBudget(spy, () => 0)
  budget.newRead()
  const n = budget.count(cjk)
  t.ok(Math.max(...seen) <= 97, 'no piece longer than a slice reaches BPE')
  t.ok(n > 4000 && n < 20000, `a plausible count: ${n}`)
  // The shared counter bounds a long run on its own too (realtime and whole answers use it).
  t.ok(count(cjk) > 1000)
})
