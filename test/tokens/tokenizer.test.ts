import t from 'tap'
import { countTokens as o200k } from 'gpt-tokenizer/encoding/o200k_base'
import { countTokens as cl100k } from 'gpt-tokenizer/encoding/cl100k_base'
import { EncodingSelector, DEFAULT_ENCODING_RULES, EXACT_MAX_CHARS, counterFor } from '../../src/tokens/tokenizer.ts'
import { WORDS, chunkText } from '../../src/sim/schedule.ts'

t.test('every simulator word is exactly one token in o200k_base and cl100k_base, alone and in a run', async (t) => {
  for (const w of WORDS) {
    t.equal(o200k(w), 1, `o200k ${JSON.stringify(w)}`)
    t.equal(cl100k(w), 1, `cl100k ${JSON.stringify(w)}`)
  }
  for (let k = 1; k <= 40; k++) {
    t.equal(counterFor('o200k_base')(chunkText(k, k)), k)
    t.equal(counterFor('cl100k_base')(chunkText(k, k)), k)
  }
})

t.test('counts match the real tokenizer, memoised or not', async (t) => {
  const count = counterFor('o200k_base')
  for (const s of ['Hello', ' world', 'héllo 🌍', '\n\n', 'function foo() { return 42 }', 'x'.repeat(100)]) {
    t.equal(count(s), o200k(s), JSON.stringify(s))
    t.equal(count(s), o200k(s), `${JSON.stringify(s)} again (memo)`)
  }
  t.equal(count(''), 0)
})

t.test('special-token text in an answer is ordinary text, never an error', async (t) => {
  const count = counterFor('o200k_base')
  t.ok(count('<|endoftext|>') > 1)
})

t.test('a huge chunk is estimated from a prefix instead of tokenized whole', async (t) => {
  const big = ' the'.repeat(EXACT_MAX_CHARS) // 4 × the exact limit in characters
  const n = counterFor('o200k_base')(big)
  t.ok(Math.abs(n - EXACT_MAX_CHARS) / EXACT_MAX_CHARS < 0.01, `estimate ${n} ≈ ${EXACT_MAX_CHARS}`)
})

t.test('models pick their encoding: GPT-4 and 3.5 use cl100k_base, everything else o200k_base, config rules first', async (t) => {
  const s = new EncodingSelector([{ pattern: '^llama', encoding: 'cl100k_base' }, ...DEFAULT_ENCODING_RULES])
  t.equal(s.encodingFor('gpt-4'), 'cl100k_base')
  t.equal(s.encodingFor('gpt-4-turbo-2024-04-09'), 'cl100k_base')
  t.equal(s.encodingFor('gpt-3.5-turbo'), 'cl100k_base')
  t.equal(s.encodingFor('gpt-4o-mini'), 'o200k_base')
  t.equal(s.encodingFor('gpt-4.1'), 'o200k_base')
  t.equal(s.encodingFor('o3-mini'), 'o200k_base')
  t.equal(s.encodingFor('claude-sonnet-4'), 'o200k_base')
  t.equal(s.encodingFor('llama-3.1-70b'), 'cl100k_base', 'a configured rule wins')
  t.equal(s.encodingFor(undefined), 'o200k_base')
  t.equal(new EncodingSelector([], 'cl100k_base').encodingFor('x'), 'cl100k_base', 'configured default')
})
