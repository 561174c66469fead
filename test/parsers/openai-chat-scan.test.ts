import t from 'tap'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { chatContext as ctx, Counting, FullParseOnly, run } from '../helpers/chat-fast-path.ts'
import { fixture, sseFromDataLines, splitOffsets } from '../helpers/fixtures.ts'

// The fast path (OpenAIChatParser.scan) reads plain text deltas without JSON.parse. On every
// recorded fixture and split it must give exactly what the full parse gives: same events from
// the same reads, same summary.

const FIXTURES: [string, Buffer][] = [
  ['openai/chat-text-role-first-usage-chunk.sse', fixture('openai/chat-text-role-first-usage-chunk.sse')],
  ['openai/chat-text-role-first-usage-then-moderation-chunk.sse', fixture('openai/chat-text-role-first-usage-then-moderation-chunk.sse')],
  ['openai/chat-tool-call-deltas-usage-chunk.sse', fixture('openai/chat-tool-call-deltas-usage-chunk.sse')],
  ['openai/completions-legacy-instruct.data.jsonl', sseFromDataLines('openai/completions-legacy-instruct.data.jsonl')],
  ['azure/azure-chat-async-content-filter.sse', fixture('azure/azure-chat-async-content-filter.sse')],
  ['azure/azure-chat-prompt-filter-model-router.data.jsonl', sseFromDataLines('azure/azure-chat-prompt-filter-model-router.data.jsonl')],
  ['vllm/chat-vllm-0.24-crusoe-usage-chunk.sse', fixture('vllm/chat-vllm-0.24-crusoe-usage-chunk.sse')],
  ['openai-compatible/deepseek-reasoning-content.sse', fixture('openai-compatible/deepseek-reasoning-content.sse')],
  ['openai-compatible/groq-event-error-midstream.sse', fixture('openai-compatible/groq-event-error-midstream.sse')],
  ['openai-compatible/mistral-thinking-content-array.sse', fixture('openai-compatible/mistral-thinking-content-array.sse')],
  ['openai-compatible/openrouter-keepalive-comments-midstream-error.sse', fixture('openai-compatible/openrouter-keepalive-comments-midstream-error.sse')],
]

for (const [name, bytes] of FIXTURES) {
  t.test(`the pre-scan gives the full parse's events and summary for ${name} at every split`, async (t) => {
    const whole = run(new FullParseOnly(ctx()), [bytes])
    const fast = run(new OpenAIChatParser(ctx()), [bytes])
    t.same(fast, whole, 'in one read')
    let mismatches = 0
    for (const at of splitOffsets(bytes.length)) {
      const parts = [bytes.subarray(0, at), bytes.subarray(at)]
      const a = run(new OpenAIChatParser(ctx()), parts)
      const b = run(new FullParseOnly(ctx()), parts)
      if (JSON.stringify(a) !== JSON.stringify(b)) mismatches++
    }
    t.equal(mismatches, 0, 'no split point differs')
  })
}

t.test('the pre-scan reads the plain text deltas of an OpenAI stream', async (t) => {
  const p = new Counting(ctx())
  const bytes = fixture('openai/chat-text-role-first-usage-chunk.sse')
  const events = [...p.push(bytes)]
  p.end()
  t.ok(p.matched > 0, `the pre-scan handled ${p.matched} events`)
  t.ok(events.length > 0)
})

const sse = (...datas: string[]): Buffer => Buffer.from(datas.map((d) => `data: ${d}\n\n`).join(''))
const FIRST = '{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
const chunk = (delta: string, tail = ''): string => `{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":${delta},"finish_reason":null}]${tail}}`

const CASES: [string, string][] = [
  ['escaped quotes and backslashes in the text', chunk('{"content":"say \\"hi\\" \\\\ ok\\\\"}')],
  ['a text ending in an escaped backslash', chunk('{"content":"a\\\\"}')],
  ['unicode escapes and raw non-ASCII text', chunk('{"content":"\\u00e9t\\u00e9 — 日本"}')],
  ['role and content in one delta', chunk('{"role":"assistant","content":"Hello"}')],
  ['content then a second content key', chunk('{"content":"a","content":"bb"}')],
  ['a nested object holding a content key', chunk('{"x":{"content":"nested"}}')],
  ['content that is an array of parts', chunk('{"content":[{"type":"text","text":"hi"}]}')],
  ['content that is null', chunk('{"content":null}')],
  ['an empty delta', chunk('{}')],
  ['a text that mentions "usage": in quotes', chunk('{"content":"the \\"usage\\": field"}')],
  ['"usage":null on the chunk (OpenAI with include_usage)', chunk('{"content":"hi"}', ',"usage":null')],
  ['a refusal set twice, the last null', chunk('{"content":"a","refusal":"no","refusal":null}')],
  ['content set twice, the last null', chunk('{"content":"a","content":null}')],
  ['usage on the same chunk', chunk('{"content":"hi"}', ',"usage":{"prompt_tokens":3,"completion_tokens":9}')],
  ['an error object beside the choices', chunk('{"content":"hi"}', ',"error":{"code":"x"}')],
  ['two choices', '{"model":"m","choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"bb cc"}}]}'],
  ['a refusal beside the content', chunk('{"content":"a","refusal":"no"}')],
  ['reasoning beside the content', chunk('{"content":"a","reasoning_content":"think"}')],
  ['tool-call arguments', chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\":1}"}}]}')],
  ['a legacy text choice', '{"model":"m","choices":[{"index":0,"text":"hello there"}]}'],
  ['a cut-off event', chunk('{"content":"hi"}').slice(0, -3)],
  ['whitespace around keys', '{"model":"m", "choices": [{"delta": {"content": "spaced"}}], "usage" : {"completion_tokens": 2}}'],
]

for (const [what, data] of CASES) {
  t.test(`the pre-scan agrees with the full parse on ${what}`, async (t) => {
    const bytes = sse(FIRST, data, data, '[DONE]')
    t.same(run(new OpenAIChatParser(ctx()), [bytes]), run(new FullParseOnly(ctx()), [bytes]))
  })
}

t.test('an event in a named SSE event (event: error) always takes the full parse', async (t) => {
  const bytes = Buffer.from(`data: ${FIRST}\n\nevent: error\ndata: ${chunk('{"content":"x"}')}\n\n`)
  const a = run(new OpenAIChatParser(ctx()), [bytes])
  t.same(a, run(new FullParseOnly(ctx()), [bytes]))
  t.ok(a.summary.error !== undefined, 'the error is seen')
})
