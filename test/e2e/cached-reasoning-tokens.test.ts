import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { replay, startUpstream } from '../helpers/upstream.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { fixture, sseFromDataLines } from '../helpers/fixtures.ts'
import { eventFrame } from '../helpers/eventstream.ts'

// llm_cached_input_tokens_total{cache} and llm_reasoning_tokens_total per provider field, from
// streams replayed through the proxy in uneven reads. Recorded streams (test/fixtures) where one
// carries the field; the recorded ones all report cache counts of 0, so each non-zero cache
// field comes from a stream written from the provider's documented format (the link is on the
// case). A field the stream does not carry makes no series: the counts are as reported, never
// estimated.

interface Expected {
  /** undefined: no series at all (the provider did not report it). */
  readonly read?: number
  readonly write?: number
  readonly reasoning?: number
  /** llm_input_tokens_total: cached tokens are part of it. */
  readonly input: number
}

interface Case {
  readonly name: string
  readonly bytes: Buffer
  readonly path: string
  readonly contentType: string
  readonly model: string
  readonly expected: Expected
}

type Typed = { readonly type: string } & Record<string, unknown>

const sse = (values: readonly unknown[]): Buffer => Buffer.from(values.map((v) => `data: ${JSON.stringify(v)}\n\n`).join(''))
/** SSE events named by their JSON `type`, as OpenAI Responses and Anthropic send them. */
const sseTyped = (values: readonly Typed[]): Buffer => Buffer.from(values.map((v) => `event: ${v.type}\ndata: ${JSON.stringify(v)}\n\n`).join(''))

/** OpenAI Chat Completions with a prompt-cache hit and reasoning (https://platform.openai.com/docs/guides/prompt-caching). */
function openAIChatCached(): Buffer {
  const base = { id: 'chatcmpl-B9', object: 'chat.completion.chunk', created: 1760000000, model: 'o4-mini-2025-04-16', system_fingerprint: null }
  return Buffer.concat([
    sse([
      { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }], usage: null },
      { ...base, choices: [{ index: 0, delta: { content: 'Cached' }, finish_reason: null }], usage: null },
      { ...base, choices: [{ index: 0, delta: { content: ' answer' }, finish_reason: null }], usage: null },
      { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null },
      {
        ...base,
        choices: [],
        usage: {
          prompt_tokens: 2006,
          completion_tokens: 300,
          total_tokens: 2306,
          prompt_tokens_details: { cached_tokens: 1920, audio_tokens: 0 },
          completion_tokens_details: { reasoning_tokens: 256, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
        },
      },
    ]),
    Buffer.from('data: [DONE]\n\n'),
  ])
}

/** DeepSeek's own cache fields without `prompt_tokens_details` (https://api-docs.deepseek.com/guides/kv_cache). */
function deepSeekCacheHit(): Buffer {
  const base = { id: 'f1c7', object: 'chat.completion.chunk', created: 1760000000, model: 'deepseek-chat', system_fingerprint: 'fp_3a5770e1b4' }
  return Buffer.concat([
    sse([
      { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, logprobs: null, finish_reason: null }] },
      {
        ...base,
        choices: [{ index: 0, delta: { content: '!' }, logprobs: null, finish_reason: 'stop' }],
        usage: { prompt_tokens: 70, completion_tokens: 2, total_tokens: 72, prompt_cache_hit_tokens: 64, prompt_cache_miss_tokens: 6 },
      },
    ]),
    Buffer.from('data: [DONE]\n\n'),
  ])
}

/** OpenAI Responses with `input_tokens_details.cached_tokens` (https://platform.openai.com/docs/api-reference/responses/object). */
function responsesCached(): Buffer {
  const response = { id: 'resp_1', object: 'response', status: 'in_progress', model: 'gpt-4.1-2025-04-14', output: [], usage: null }
  return sseTyped([
    { type: 'response.created', response },
    { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'From' },
    { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta: ' cache' },
    {
      type: 'response.completed',
      response: {
        ...response,
        status: 'completed',
        usage: { input_tokens: 1300, input_tokens_details: { cached_tokens: 1024 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 1302 },
      },
    },
  ])
}

/** Anthropic Messages writing and reading the prompt cache (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching). */
function anthropicCached(read: number, creation: number): Buffer {
  return sseTyped([
    {
      type: 'message_start',
      message: {
        id: 'msg_01',
        type: 'message',
        role: 'assistant',
        model: 'claude-sonnet-4-5-20250929',
        content: [],
        stop_reason: null,
        usage: { input_tokens: 21, cache_creation_input_tokens: creation, cache_read_input_tokens: read, output_tokens: 1 },
      },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Cached.' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } },
    { type: 'message_stop' },
  ])
}

/** Gemini with a context-cache hit (`usageMetadata.cachedContentTokenCount`, https://ai.google.dev/api/generate-content#UsageMetadata). */
function geminiCached(): Buffer {
  const usage = { promptTokenCount: 4200, candidatesTokenCount: 2, totalTokenCount: 4242, cachedContentTokenCount: 4096, thoughtsTokenCount: 40 }
  return sse([
    { candidates: [{ content: { parts: [{ text: 'Cached' }], role: 'model' } }], usageMetadata: { ...usage, candidatesTokenCount: 1 }, modelVersion: 'gemini-2.5-flash' },
    { candidates: [{ content: { parts: [{ text: ' text' }], role: 'model' }, finishReason: 'STOP' }], usageMetadata: usage, modelVersion: 'gemini-2.5-flash' },
  ])
}

/** Bedrock ConverseStream metadata with cache counts (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html). */
function bedrockCached(): Buffer {
  return Buffer.concat([
    eventFrame('messageStart', { role: 'assistant', p: 'abc' }),
    eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Cached' }, p: 'abc' }),
    eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' reply' }, p: 'abc' }),
    eventFrame('contentBlockStop', { contentBlockIndex: 0, p: 'abc' }),
    eventFrame('messageStop', { stopReason: 'end_turn', p: 'abc' }),
    eventFrame('metadata', { metrics: { latencyMs: 410 }, usage: { inputTokens: 12, outputTokens: 2, cacheReadInputTokens: 1500, cacheWriteInputTokens: 300, totalTokens: 1814 }, p: 'abc' }),
  ])
}

/** llama.cpp `llama-server`: `timings.cache_n`, the prompt tokens reused from the KV cache (tools/server/README.md). */
function llamaCppCached(): Buffer {
  const base = { created: 1756000000, id: 'chatcmpl-xK2', model: 'qwen2.5-7b-instruct', object: 'chat.completion.chunk' }
  return Buffer.concat([
    sse([
      { choices: [{ finish_reason: null, index: 0, delta: { content: 'Warm' } }], ...base },
      { choices: [{ finish_reason: 'stop', index: 0, delta: {} }], ...base, timings: { cache_n: 90, prompt_n: 5, prompt_ms: 12.3, predicted_n: 2, predicted_ms: 20.1 } },
    ]),
    Buffer.from('data: [DONE]\n\n'),
  ])
}

const SSE = 'text/event-stream'
const CASES: Case[] = [
  // Recorded streams.
  {
    name: 'OpenAI chat (recorded): prompt_tokens_details.cached_tokens 0 and reasoning_tokens 0 are counted as 0',
    bytes: fixture('openai/chat-text-role-first-usage-chunk.sse'),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, reasoning: 0, input: 78 },
  },
  {
    name: 'Azure OpenAI (recorded): completion_tokens_details.reasoning_tokens 64',
    bytes: sseFromDataLines('azure/azure-chat-prompt-filter-model-router.data.jsonl'),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, reasoning: 64, input: 15 },
  },
  {
    name: 'DeepSeek (recorded): reasoning_tokens 198, cached_tokens 0 (prompt_tokens_details wins over prompt_cache_hit_tokens)',
    bytes: fixture('openai-compatible/deepseek-reasoning-content.sse'),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, reasoning: 198, input: 6 },
  },
  {
    name: 'vLLM (recorded): prompt_tokens_details.cached_tokens 0, no reasoning count',
    bytes: fixture('vllm/chat-vllm-0.24-crusoe-usage-chunk.sse'),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, input: 46 },
  },
  {
    name: 'OpenAI Responses (recorded): output_tokens_details.reasoning_tokens 1408, input_tokens_details.cached_tokens 0',
    bytes: fixture('openai-responses/responses-reasoning-summary-then-text.sse'),
    path: '/v1/responses',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, reasoning: 1408, input: 13 },
  },
  {
    name: 'Anthropic (recorded): cache_read_input_tokens 0 and cache_creation_input_tokens 0, no reasoning count',
    bytes: fixture('anthropic/messages-thinking-signature-text.sse'),
    path: '/v1/messages',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, write: 0, input: 43 },
  },
  {
    name: 'Gemini (recorded): thoughtsTokenCount 787, no cachedContentTokenCount',
    bytes: fixture('gemini/gemini-sse-thinking-thought-parts.sse'),
    path: '/v1beta/models/gemini-2.5-pro:streamGenerateContent',
    contentType: SSE,
    model: 'gemini-2.5-pro',
    expected: { reasoning: 787, input: 34 },
  },
  {
    name: 'Bedrock ConverseStream (recorded): usage without cache fields makes no cache series',
    bytes: fixture('bedrock/converse-stream-nova-text.eventstream'),
    path: '/model/us.amazon.nova-micro-v1:0/converse-stream',
    contentType: 'application/vnd.amazon.eventstream',
    model: 'us.amazon.nova-micro-v1:0',
    expected: { input: 13 },
  },
  // Written from the documented formats.
  {
    name: 'OpenAI chat (written): cached_tokens 1920 and reasoning_tokens 256',
    bytes: openAIChatCached(),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 1920, reasoning: 256, input: 2006 },
  },
  {
    name: 'DeepSeek (written): prompt_cache_hit_tokens 64 is the cache read when there are no prompt_tokens_details',
    bytes: deepSeekCacheHit(),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 64, input: 70 },
  },
  {
    name: 'OpenAI Responses (written): input_tokens_details.cached_tokens 1024',
    bytes: responsesCached(),
    path: '/v1/responses',
    contentType: SSE,
    model: 'm',
    expected: { read: 1024, reasoning: 0, input: 1300 },
  },
  {
    name: 'Anthropic (written): cache_creation_input_tokens 188086 is a cache write',
    bytes: anthropicCached(0, 188086),
    path: '/v1/messages',
    contentType: SSE,
    model: 'm',
    expected: { read: 0, write: 188086, input: 21 + 188086 },
  },
  {
    name: 'Anthropic (written): cache_read_input_tokens 188086 is a cache read',
    bytes: anthropicCached(188086, 0),
    path: '/v1/messages',
    contentType: SSE,
    model: 'm',
    expected: { read: 188086, write: 0, input: 21 + 188086 },
  },
  {
    name: 'Gemini (written): cachedContentTokenCount 4096 and thoughtsTokenCount 40',
    bytes: geminiCached(),
    path: '/v1beta/models/gemini-2.5-flash:streamGenerateContent',
    contentType: SSE,
    model: 'gemini-2.5-flash',
    expected: { read: 4096, reasoning: 40, input: 4200 },
  },
  {
    name: 'Bedrock ConverseStream (written): cacheReadInputTokens 1500 and cacheWriteInputTokens 300, both part of the input',
    bytes: bedrockCached(),
    path: '/model/anthropic.claude-sonnet-4-5-v1:0/converse-stream',
    contentType: 'application/vnd.amazon.eventstream',
    model: 'anthropic.claude-sonnet-4-5-v1:0',
    expected: { read: 1500, write: 300, input: 12 + 1500 + 300 },
  },
  {
    name: 'llama.cpp (written): timings.cache_n 90 is a cache read',
    bytes: llamaCppCached(),
    path: '/v1/chat/completions',
    contentType: SSE,
    model: 'm',
    expected: { read: 90, input: 95 },
  },
]

for (const c of CASES) {
  t.test(c.name, async (t) => {
    const pieces: { afterMs: number; bytes: Buffer }[] = []
    for (let at = 0, i = 0; at < c.bytes.length; i++) {
      const size = 1 + ((i * 7919) % 700)
      pieces.push({ afterMs: 1, bytes: c.bytes.subarray(at, at + size) })
      at += size
    }
    const upstream = await startUpstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': c.contentType })
      await replay(res, pieces)
    })
    t.teardown(() => upstream.close())
    const proxy = await startProxy({ routes: [{ prefix: '/p', upstream: upstream.url }] })
    t.teardown(() => proxy.close())

    const res = await fetch(`${proxy.url}/p${c.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: c.model, stream: true }) })
    t.ok(Buffer.from(await res.arrayBuffer()).equals(c.bytes), 'the client received the bytes unchanged')
    await proxy.waitForRequests(1)
    const m = await proxy.scrape()
    const labels = { route: '/p', model: c.model }
    const e = c.expected
    const read = select(m, 'llm_cached_input_tokens_total', { ...labels, cache: 'read' })
    const write = select(m, 'llm_cached_input_tokens_total', { ...labels, cache: 'write' })
    const reasoning = select(m, 'llm_reasoning_tokens_total', labels)
    t.same(
      read.map((s) => s.value),
      e.read === undefined ? [] : [e.read],
      'cache="read"',
    )
    t.same(
      write.map((s) => s.value),
      e.write === undefined ? [] : [e.write],
      'cache="write"',
    )
    t.same(
      reasoning.map((s) => s.value),
      e.reasoning === undefined ? [] : [e.reasoning],
      'reasoning',
    )
    t.equal(sumOf(m, 'llm_input_tokens_total', labels), e.input, 'the cached tokens are part of the input count')
  })
}
