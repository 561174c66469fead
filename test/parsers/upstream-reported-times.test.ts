import t from 'tap'
import { BedrockParser, summarizeBedrockBody } from '../../src/parsers/bedrock.ts'
import { summarizeOpenAIBody } from '../../src/parsers/openai-body.ts'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { OllamaParser, summarizeOllamaBody } from '../../src/parsers/ollama.ts'
import { tgiHeaderTimes } from '../../src/parsers/tgi.ts'
import { MAX_REPORTED_SECONDS, reportedSeconds, Unit } from '../../src/parsers/reported-times.ts'
import type { ReportedTimes } from '../../src/parsers/reported-times.ts'
import { chunkFrame, eventFrame } from '../helpers/eventstream.ts'
import { feed, fixture, parserContext, splitAt, splitOffsets } from '../helpers/feed.ts'
import { defined } from '../helpers/defined.ts'

/**
 * The upstream's own timings, per provider field: each read in the provider's unit and turned
 * into seconds. Values are compared back in the provider's own unit, rounded to it, so the
 * assertion is exact whatever the floating-point product.
 */

/** The reported times in a unit (`1e9`: ns, `1e3`: ms, `1e6`: µs), rounded to whole units. */
function inUnit(reported: ReportedTimes | undefined, perSecond: number): Record<string, number> {
  return Object.fromEntries(Object.entries(defined(reported, 'reported times')).map(([phase, s]) => [phase, Math.round(s * perSecond)]))
}

const ndjson = parserContext({ path: '/api/chat', contentType: 'application/x-ndjson' })
const eventstream = parserContext({ path: '/model/x/converse-stream', contentType: 'application/vnd.amazon.eventstream' })
const sse = parserContext({ path: '/v1/chat/completions', contentType: 'text/event-stream' })

for (const [name, ns] of [
  ['ollama/api-chat-stream.ndjson', { load: 38473250, prompt: 27608250, generation: 105611917, total: 171946792 }],
  ['ollama/api-generate-stream.ndjson', { load: 40691625, prompt: 40168500, generation: 108922125, total: 190084083 }],
] as const) {
  t.test(`${name} (recorded): Ollama's load, prompt eval, eval and total durations in ns, at every split`, async (t) => {
    const bytes = fixture(name)
    const whole = feed(new OllamaParser(ndjson), [bytes])
    t.same(inUnit(whole.summary.reported, 1e9), ns)
    for (const i of splitOffsets(bytes.length, 100)) {
      t.same(feed(new OllamaParser(ndjson), splitAt(bytes, i)).summary.reported, whole.summary.reported, `split at ${i}`)
    }
  })
}

t.test('a whole Ollama answer (stream: false) reports the same four phases', async (t) => {
  const answer = { model: 'llama3.2', done: true, total_duration: 5_000_000_000, load_duration: 1_500_000_000, prompt_eval_duration: 250_000_000, eval_duration: 3_000_000_000 }
  t.same(summarizeOllamaBody(answer).reported, { total: 5, load: 1.5, prompt: 0.25, generation: 3 })
})

t.test('an Ollama line before done reports nothing, and insane durations are dropped', async (t) => {
  const lines = [
    { model: 'm', message: { content: 'a' }, done: false, total_duration: 5 },
    { model: 'm', message: { content: '' }, done: true, load_duration: -5, prompt_eval_duration: '12', eval_duration: Number.MAX_VALUE, total_duration: 2e9 },
  ]
  const r = feed(new OllamaParser(ndjson), [Buffer.from(`${lines.map((l) => JSON.stringify(l)).join('\n')}\n`)])
  t.same(r.summary.reported, { total: 2 }, 'only the sane total: a negative, a string and 1.8e308 ns are not durations')
})

for (const [name, ms] of [
  ['bedrock/converse-stream-nova-text.eventstream', 522],
  ['bedrock/converse-stream-claude-reasoning.eventstream', 1999],
] as const) {
  t.test(`${name} (recorded): ConverseStream's metadata.metrics.latencyMs is the total, at every split`, async (t) => {
    const bytes = fixture(name)
    const whole = feed(new BedrockParser(eventstream), [bytes])
    t.same(inUnit(whole.summary.reported, 1e3), { total: ms })
    for (const i of splitOffsets(bytes.length, 100)) {
      t.same(feed(new BedrockParser(eventstream), splitAt(bytes, i)).summary.reported, whole.summary.reported, `split at ${i}`)
    }
  })
}

t.test("InvokeModelWithResponseStream (written from AWS's documented format): firstByteLatency is the prompt phase, invocationLatency the total", async (t) => {
  const bytes = Buffer.concat([
    chunkFrame({ type: 'message_start', message: { model: 'claude-3-5-haiku-20241022', usage: { input_tokens: 21 } } }),
    chunkFrame({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } }),
    chunkFrame({ type: 'message_stop', 'amazon-bedrock-invocationMetrics': { inputTokenCount: 21, outputTokenCount: 12, invocationLatency: 1234, firstByteLatency: 321 } }),
  ])
  t.same(inUnit(feed(new BedrockParser(eventstream), [bytes]).summary.reported, 1e3), { prompt: 321, total: 1234 })
})

t.test("a whole Converse answer's metrics.latencyMs is the total", async (t) => {
  t.same(summarizeBedrockBody({ output: {}, usage: { inputTokens: 3, outputTokens: 4 }, metrics: { latencyMs: 750 } }).reported, { total: 0.75 })
  t.equal(summarizeBedrockBody({ usage: { inputTokens: 3 }, metrics: { latencyMs: 'slow' } }).reported, undefined)
})

/** Groq's last chunk, as its API reference documents a streamed chat completion (seconds). */
const groqStream = [
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730241104,"model":"llama-3.3-70b-versatile","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"x_groq":{"id":"req_1"}}',
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730241104,"model":"llama-3.3-70b-versatile","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}',
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730241104,"model":"llama-3.3-70b-versatile","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.017848395,"prompt_tokens":40,"prompt_time":0.002336176,"completion_tokens":9,"completion_time":0.032727273,"total_tokens":49,"total_time":0.035063449}}}',
  'data: [DONE]',
]
  .map((l) => `${l}\n\n`)
  .join('')

t.test("Groq's x_groq.usage (written from Groq's documented stream): queue, prompt, completion and total time in seconds, at every split", async (t) => {
  const bytes = Buffer.from(groqStream)
  const whole = feed(new OpenAIChatParser(sse), [bytes])
  t.same(whole.summary.reported, { queue: 0.017848395, prompt: 0.002336176, generation: 0.032727273, total: 0.035063449 })
  t.same(whole.summary.usage, { output: 9, input: 40 })
  for (const i of splitOffsets(bytes.length, 100)) {
    t.same(feed(new OpenAIChatParser(sse), splitAt(bytes, i)).summary.reported, whole.summary.reported, `split at ${i}`)
  }
})

t.test('a whole Groq answer carries the same times in its usage', async (t) => {
  const answer = { model: 'llama-3.3-70b-versatile', usage: { queue_time: 0.5, prompt_tokens: 4, prompt_time: 0.25, completion_tokens: 2, completion_time: 0.125, total_time: 0.375 } }
  t.same(summarizeOpenAIBody(answer).reported, { queue: 0.5, prompt: 0.25, generation: 0.125, total: 0.375 })
})

/** llama.cpp server's chunks with `timings` (tools/server/README.md), `timings_per_token` on: every chunk carries them. */
const llamaCppStream = [
  'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":1,"id":"chatcmpl-x","model":"gpt-3.5-turbo","object":"chat.completion.chunk","timings":{"prompt_n":19,"prompt_ms":45.123,"prompt_per_token_ms":2.375,"prompt_per_second":421.1,"predicted_n":1,"predicted_ms":0.001,"predicted_per_token_ms":0.001,"predicted_per_second":1000}}',
  'data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"chatcmpl-x","model":"gpt-3.5-turbo","object":"chat.completion.chunk","usage":{"completion_tokens":10,"prompt_tokens":19,"total_tokens":29},"timings":{"cache_n":0,"prompt_n":19,"prompt_ms":45.123,"prompt_per_token_ms":2.375,"prompt_per_second":421.1,"predicted_n":10,"predicted_ms":120.456,"predicted_per_token_ms":12.0456,"predicted_per_second":83.02}}',
  'data: [DONE]',
]
  .map((l) => `${l}\n\n`)
  .join('')

t.test("llama.cpp's timings (written from its server README): prompt_ms and predicted_ms, the last chunk's winning, at every split", async (t) => {
  const bytes = Buffer.from(llamaCppStream)
  const whole = feed(new OpenAIChatParser(sse), [bytes])
  t.same(inUnit(whole.summary.reported, 1e6), { prompt: 45123, generation: 120456 }, 'in µs: the last chunk replaced the running figures')
  for (const i of splitOffsets(bytes.length, 100)) {
    t.same(feed(new OpenAIChatParser(sse), splitAt(bytes, i)).summary.reported, whole.summary.reported, `split at ${i}`)
  }
  const body = summarizeOpenAIBody({ model: 'm', usage: { completion_tokens: 1 }, timings: { prompt_ms: 2.5, predicted_ms: 10 } })
  t.same(body.reported, { prompt: 0.0025, generation: 0.01 }, 'a whole llama.cpp answer too')
})

t.test("vLLM's per-request metrics (shaped from its docs): queue, TTFT from scheduling as prompt, generation; speculative drafts and the prefix-cache read and write, at every split", async (t) => {
  const bytes = fixture('vllm/chat-per-request-metrics.sse')
  const whole = feed(new OpenAIChatParser(sse), [bytes])
  t.same(inUnit(whole.summary.reported, 1e4), { queue: 123, prompt: 852, generation: 12405 }, 'in 0.1 ms: queue_time_ms 12.3, time_to_first_token_ms 85.2, generation_time_ms 1240.5')
  t.same(whole.summary.speculative, { drafted: 129, accepted: 10 })
  t.same(whole.summary.usage, { output: 8, input: 42, cacheRead: 32, cacheWrite: 10 })
  for (const i of splitOffsets(bytes.length, 100)) {
    const split = feed(new OpenAIChatParser(sse), splitAt(bytes, i)).summary
    t.same([split.reported, split.speculative, split.usage], [whole.summary.reported, whole.summary.speculative, whole.summary.usage], `split at ${i}`)
  }
  const body = summarizeOpenAIBody({
    model: 'm',
    usage: { completion_tokens: 1 },
    metrics: { time_to_first_token_ms: 2.5, generation_time_ms: null, queue_time_ms: 0, mean_itl_ms: null, tokens_per_second: null },
  })
  t.same(body.reported, { queue: 0, prompt: 0.0025 }, 'a whole answer too; a null field is not reported')
  t.equal(body.speculative, undefined)
  const odd = summarizeOpenAIBody({ metrics: { speculative_decoding: { num_draft_tokens: 3, num_accepted_draft_tokens: 4 } } })
  t.equal(odd.speculative, undefined, 'more accepted than drafted is not believed')
})

t.test("Ollama's prompt_eval_cached_count is the prompt tokens read from its cache", async (t) => {
  // The final object as a 2026 Ollama writes it (prompt_eval_cached_count beside prompt_eval_count).
  const line =
    '{"model":"llama3.2:1b","created_at":"2026-09-17T15:42:59.7420965Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":30258609300,"load_duration":19906358300,"prompt_eval_count":29,"prompt_eval_cached_count":24,"prompt_eval_duration":10175903000,"eval_count":3,"eval_duration":173639000}\n'
  t.same(feed(new OllamaParser(ndjson), [Buffer.from(line)]).summary.usage, { output: 3, input: 29, cacheRead: 24 })
  t.same(summarizeOllamaBody({ done: true, prompt_eval_count: 10, prompt_eval_cached_count: 0, eval_count: 1 }).usage, { output: 1, input: 10, cacheRead: 0 }, 'a reported 0 is a count')
})

t.test('a plain OpenAI stream reports no upstream times', async (t) => {
  t.equal(feed(new OpenAIChatParser(sse), [fixture('openai/chat-text-role-first-usage-chunk.sse')]).summary.reported, undefined)
  t.equal(feed(new BedrockParser(eventstream), [eventFrame('metadata', { usage: { inputTokens: 1, outputTokens: 2 } })]).summary.reported, undefined)
})

t.test('a reported duration is a finite number >= 0, at most a day, in its unit', async (t) => {
  t.equal(reportedSeconds(1500, Unit.ms), 1.5)
  t.equal(reportedSeconds(0, Unit.ns), 0, '0 is a real report (a model already loaded)')
  t.equal(reportedSeconds(MAX_REPORTED_SECONDS, Unit.s), MAX_REPORTED_SECONDS)
  t.equal(reportedSeconds(MAX_REPORTED_SECONDS + 1, Unit.s), undefined, 'over a day: a unit mix-up, not a timing')
  t.equal(reportedSeconds(1e15, Unit.ns), undefined, '11.6 days in ns')
  for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, '12', null, undefined, {}, true]) t.equal(reportedSeconds(bad, Unit.s), undefined, `${String(bad)} is no duration`)
})

t.test("TGI's timing headers: whole or decimal milliseconds, anything else dropped", async (t) => {
  const headers = (h: Record<string, string>) => (name: string) => h[name]
  t.same(tgiHeaderTimes(headers({ 'x-queue-time': '12', 'x-total-time': '340.5' })), { queue: 0.012, total: 0.3405 })
  t.same(tgiHeaderTimes(headers({ 'x-total-time': '7' })), { total: 0.007 })
  t.equal(tgiHeaderTimes(headers({})), undefined)
  t.equal(tgiHeaderTimes(headers({ 'x-queue-time': '-1', 'x-total-time': '1e9' })), undefined, 'a negative and an exponent are no durations')
  t.equal(tgiHeaderTimes(headers({ 'x-total-time': '86400001' })), undefined, 'over a day')
})
