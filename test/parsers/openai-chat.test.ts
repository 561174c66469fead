import t from 'tap'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { openai, selectParser } from '../../src/parsers/registry.ts'
import { feed, fixture, parserContext, splitAt, splitOffsets, sseFromDataLines, totals } from '../helpers/feed.ts'

const ctx = parserContext({ path: '/v1/chat/completions', contentType: 'text/event-stream' })

/** The fields of a Chat Completions / Completions chunk the reference reading looks at (any may be missing). */
interface Chunk {
  error?: { code?: string; type?: string }
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number }
  choices?: Choice[]
}
interface Choice {
  index?: number
  text?: string
  delta?: {
    content?: string | { type?: string; text?: string; thinking?: { text?: string }[] }[] | null
    refusal?: string | null
    reasoning_content?: string | null
    reasoning?: string | null
    tool_calls?: { function?: { arguments?: string } }[]
  }
}

/**
 * The reference reading, written plainly and separately from the parser: events split on blank
 * lines, `data:` lines joined, JSON parsed; a content chunk is an event with any non-empty
 * generated text (content string or parts, refusal, reasoning_content / reasoning, tool-call
 * arguments, legacy text). Kind letter: t(ext) before o (tool) before r(easoning).
 */
function reference(body: Buffer): { kinds: string; output?: number; error?: string } {
  let kinds = ''
  let output: number | undefined
  let error: string | undefined
  for (const block of body.toString('utf8').split(/\r\n\r\n|\n\n|\r\r/)) {
    const lines = block.split(/\r\n|\n|\r/)
    const data = lines
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n')
    if (data === '' || data === '[DONE]') continue
    let v: Chunk
    try {
      v = JSON.parse(data) as Chunk
    } catch {
      continue // an event cut by the end of the capture
    }
    if (lines.includes('event: error') || v.error) error = String(v.error?.code ?? v.error?.type)
    if (v.usage && typeof v.usage.completion_tokens === 'number') output = v.usage.completion_tokens
    let text = false
    let tool = false
    let reasoning = false
    for (const c of v.choices ?? []) {
      if (c.text) text = true
      const d = c.delta ?? {}
      if (typeof d.content === 'string' && d.content) text = true
      if (Array.isArray(d.content)) {
        for (const p of d.content) {
          if (p.type === 'text' && p.text) text = true
          if (p.type === 'thinking' && (p.thinking ?? []).some((x) => x.text)) reasoning = true
        }
      }
      if (d.refusal) text = true
      if (d.reasoning_content || d.reasoning) reasoning = true
      if ((d.tool_calls ?? []).some((c) => c.function?.arguments)) tool = true
    }
    if (text) kinds += 't'
    else if (tool) kinds += 'o'
    else if (reasoning) kinds += 'r'
  }
  return { kinds, output, error }
}

const letter = { text: 't', tool: 'o', reasoning: 'r' } as const

/** Every recorded OpenAI-compatible Chat Completions / Completions stream, with facts from SOURCES.md. */
const CASES: { name: string; bytes: () => Buffer; chunks?: number; output?: number; error?: string; model: string }[] = [
  { name: 'openai/chat-text-role-first-usage-chunk.sse', bytes: () => fixture('openai/chat-text-role-first-usage-chunk.sse'), chunks: 8, output: 9, model: 'gpt-4o-mini-2024-07-18' },
  {
    name: 'openai/chat-text-role-first-usage-then-moderation-chunk.sse',
    bytes: () => fixture('openai/chat-text-role-first-usage-then-moderation-chunk.sse'),
    chunks: 2,
    output: 11,
    model: 'gpt-5-2025-08-07',
  },
  { name: 'openai/chat-tool-call-deltas-usage-chunk.sse', bytes: () => fixture('openai/chat-tool-call-deltas-usage-chunk.sse'), model: 'gpt-4o-mini-2024-07-18' },
  { name: 'openai/completions-legacy-instruct.data.jsonl', bytes: () => sseFromDataLines('openai/completions-legacy-instruct.data.jsonl'), model: 'gpt-3.5-turbo-instruct:20230824-v2' },
  { name: 'azure/azure-chat-async-content-filter.sse', bytes: () => fixture('azure/azure-chat-async-content-filter.sse'), chunks: 1, model: 'gpt-4o-2024-05-13' },
  { name: 'azure/azure-chat-prompt-filter-model-router.data.jsonl', bytes: () => sseFromDataLines('azure/azure-chat-prompt-filter-model-router.data.jsonl'), model: 'gpt-5-nano-2025-08-07' },
  { name: 'vllm/chat-vllm-0.24-crusoe-usage-chunk.sse', bytes: () => fixture('vllm/chat-vllm-0.24-crusoe-usage-chunk.sse'), chunks: 13, output: 14, model: 'meta-llama/Llama-3.3-70B-Instruct' },
  { name: 'openai-compatible/deepseek-reasoning-content.sse', bytes: () => fixture('openai-compatible/deepseek-reasoning-content.sse'), model: 'deepseek-reasoner' },
  { name: 'openai-compatible/groq-event-error-midstream.sse', bytes: () => fixture('openai-compatible/groq-event-error-midstream.sse'), error: 'tool_use_failed', model: 'openai/gpt-oss-120b' },
  { name: 'openai-compatible/mistral-thinking-content-array.sse', bytes: () => fixture('openai-compatible/mistral-thinking-content-array.sse'), model: 'magistral-medium-latest' },
  {
    name: 'openai-compatible/openrouter-keepalive-comments-midstream-error.sse',
    bytes: () => fixture('openai-compatible/openrouter-keepalive-comments-midstream-error.sse'),
    error: '400',
    output: 10,
    model: 'minimax/minimax-m2:free',
  },
  { name: 'tgi/v1-chat-stream-tgi-1.4.4.sse', bytes: () => fixture('tgi/v1-chat-stream-tgi-1.4.4.sse'), chunks: 100, model: 'teknium/OpenHermes-2.5-Mistral-7B' },
]

for (const c of CASES) {
  t.test(`${c.name}: content chunks, usage and errors as the stream reports them, whole and at every split`, async (t) => {
    const bytes = c.bytes()
    const want = reference(bytes)
    t.ok(want.kinds.length > 0, `${want.kinds.length} content chunks`)
    if (c.chunks !== undefined) t.equal(want.kinds.length, c.chunks, 'the reference count agrees with SOURCES.md')
    if (c.output !== undefined) t.equal(want.output, c.output)
    t.equal(want.error, c.error)
    const whole = feed(new OpenAIChatParser(ctx), [bytes])
    t.equal(whole.events.map((e) => letter[e.kind]).join(''), want.kinds, 'same content chunks, same kinds')
    t.ok(whole.events.every((e) => e.tokens >= 1 && !e.exact))
    t.equal(whole.summary.usage?.output, want.output, 'usage as the stream reports it')
    t.equal(whole.summary.error, want.error)
    t.equal(whole.summary.model, c.model)
    t.equal(whole.summary.parseError, undefined)
    for (const i of splitOffsets(bytes.length, 250)) {
      const r = feed(new OpenAIChatParser(ctx), splitAt(bytes, i))
      t.same([totals(r), r.summary], [totals(whole), whole.summary], `split at ${i}`)
    }
  })
}

t.test('Azure: the prompt-filter chunk, the role chunk and the async-filter chunks after finish are not content', async (t) => {
  const bytes = fixture('azure/azure-chat-async-content-filter.sse')
  const events = bytes.toString('utf8').split('\n\n')
  const r = feed(
    new OpenAIChatParser(ctx),
    events.map((e, i) => Buffer.from(i < events.length - 1 ? `${e}\n\n` : e)),
  )
  t.same(r.reads, [2], 'only the third event ("Kindness") is a content chunk')
  t.equal(r.summary.model, 'gpt-4o-2024-05-13', 'the empty model of the prompt-filter chunk is skipped')
})

t.test('Azure deployment paths name the model when the body has none', async (t) => {
  t.equal(openai.modelFromPath?.('/openai/deployments/my-gpt4o/chat/completions'), 'my-gpt4o')
  t.equal(openai.modelFromPath?.('/openai/deployments/legacy/completions'), 'legacy')
  t.equal(openai.modelFromPath?.('/v1/chat/completions'), undefined)
  t.ok(openai.ownsPath('/openai/deployments/my-gpt4o/chat/completions'))
})

/** The vLLM capture with `continuous_usage_stats`: a running usage on every chunk (vllm-project/vllm#9028). */
function withContinuousUsage(bytes: Buffer, perChunk: (j: number) => number): { body: Buffer; ks: number[] } {
  let completion = 0
  let j = 0
  const ks: number[] = []
  const out = bytes
    .toString('utf8')
    .split('\n\n')
    .map((event) => {
      if (!event.startsWith('data: {')) return event
      const v = JSON.parse(event.slice(6)) as Chunk & { choices: Choice[] }
      if (v.choices.length === 0) return event // the final usage chunk stays as recorded
      if (v.choices[0].delta?.content) {
        const k = perChunk(j++)
        ks.push(k)
        completion += k
      }
      v.usage = { prompt_tokens: 46, total_tokens: 46 + completion, completion_tokens: completion }
      return `data: ${JSON.stringify(v)}`
    })
    .join('\n\n')
  return { body: Buffer.from(out), ks }
}

t.test('vLLM continuous usage stats give exact per-chunk counts from the cumulative completion_tokens', async (t) => {
  const { body, ks } = withContinuousUsage(fixture('vllm/chat-vllm-0.24-crusoe-usage-chunk.sse'), (j) => (j === 12 ? 2 : 1))
  t.equal(ks.length, 13)
  t.equal(
    ks.reduce((a, b) => a + b, 0),
    14,
    'the synthetic counts add up to the recorded usage',
  )
  const whole = feed(new OpenAIChatParser(ctx), [body])
  t.same(
    whole.events.map((e) => e.tokens),
    ks,
  )
  t.ok(
    whole.events.every((e) => e.exact),
    "every count is the provider's",
  )
  t.equal(whole.summary.usage?.output, 14)
  for (const i of splitOffsets(body.length, 200)) {
    const r = feed(new OpenAIChatParser(ctx), splitAt(body, i))
    t.same(
      r.events.map((e) => [e.tokens, e.exact]),
      ks.map((k) => [k, true]),
      `split at ${i}`,
    )
  }
})

t.test('continuous usage whose first chunk already carries text is exact from the first chunk', async (t) => {
  const ev = (v: Chunk) => `data: ${JSON.stringify(v)}\n\n`
  const body =
    ev({ choices: [{ index: 0, text: 'Hello there' }], usage: { prompt_tokens: 3, completion_tokens: 2 } }) +
    ev({ choices: [{ index: 0, text: ' you' }], usage: { prompt_tokens: 3, completion_tokens: 3 } }) +
    'data: [DONE]\n\n'
  const r = feed(new OpenAIChatParser(ctx), [Buffer.from(body)])
  t.same(
    r.events.map((e) => [e.tokens, e.exact]),
    [
      [2, true],
      [1, true],
    ],
  )
})

t.test('a chunk whose running usage does not advance falls back to the tokenizer', async (t) => {
  const ev = (v: Chunk) => `data: ${JSON.stringify(v)}\n\n`
  const body = ev({ choices: [{ index: 0, delta: { content: 'a' } }], usage: { completion_tokens: 1 } }) + ev({ choices: [{ index: 0, delta: { content: 'b' } }], usage: { completion_tokens: 1 } })
  const r = feed(new OpenAIChatParser(ctx), [Buffer.from(body)])
  t.same(
    r.events.map((e) => e.exact),
    [true, false],
  )
})

t.test('usage only on the last chunk is not taken for per-chunk counts', async (t) => {
  const r = feed(new OpenAIChatParser(ctx), [fixture('openai-compatible/deepseek-reasoning-content.sse')])
  t.ok(r.events.every((e) => !e.exact))
  t.ok(r.summary.usage?.reasoning !== undefined && r.summary.usage.reasoning > 0, 'reasoning tokens are read')
})

t.test('an unknown path with an SSE body is read as OpenAI-compatible', async (t) => {
  const sel = selectParser('auto', '/some/other/stream', 'text/event-stream', ctx)
  t.equal(sel.provider, 'openai')
  t.type(sel.parser, OpenAIChatParser)
})
