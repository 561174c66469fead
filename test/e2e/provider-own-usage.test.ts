import t from 'tap'
import type { Test } from 'tap'
import OpenAI from 'openai'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { replay, sseEvents, startUpstream } from '../helpers/upstream.ts'
import { fixture } from '../helpers/fixtures.ts'
import { feed, parserContext } from '../helpers/feed.ts'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { reconcileTokens } from '../../src/timing/request-timing.ts'

// Usage that servers report in their own place, not in the top-level `usage` the OpenAI API
// has: Groq's `x_groq.usage`, llama.cpp's `timings`, and TGI native streams without `details`
// (counted exactly from their token events). Streams are built in each server's own shape
// (field order and members as those servers write them); the reported counts are chosen to
// differ from the tokenizer's count of the text, so a test shows where a total came from.

const WORDS = ['Hello', ' there', ',', ' how', ' can', ' I', ' help', '?']

/** Groq (before it also wrote a top-level `usage`): usage only in `x_groq.usage` of the finish chunk. */
function groqStream(completion: number, prompt: number): string {
  const base = { id: 'chatcmpl-0d3c7b4e', object: 'chat.completion.chunk', created: 1718000000, model: 'llama3-8b-8192', system_fingerprint: 'fp_af05557ca2' }
  const chunk = (delta: object, finish: string | null, xGroq?: object): string =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(xGroq === undefined ? {} : { x_groq: xGroq }) })}\n\n`
  return [
    chunk({ role: 'assistant', content: '' }, null, { id: 'req_01j0abc' }),
    ...WORDS.map((w) => chunk({ content: w }, null)),
    chunk({}, 'stop', {
      id: 'req_01j0abc',
      usage: { queue_time: 0.012, prompt_tokens: prompt, prompt_time: 0.002, completion_tokens: completion, completion_time: 0.008, total_tokens: prompt + completion, total_time: 0.01 },
    }),
    'data: [DONE]\n\n',
  ].join('')
}

/** llama.cpp `llama-server` /v1/chat/completions: `timings` (and, in newer builds, `usage`) on the finish chunk. */
function llamaCppStream(timings: { predicted_n: number; prompt_n: number; cache_n: number }, usage?: { completion_tokens: number; prompt_tokens: number }): string {
  const base = { created: 1756000000, id: 'chatcmpl-xK2', model: 'gpt-3.5-turbo', system_fingerprint: 'b6280-0cc4c87e', object: 'chat.completion.chunk' }
  const chunk = (delta: object, finish: string | null, extra: object = {}): string => `data: ${JSON.stringify({ choices: [{ finish_reason: finish, index: 0, delta }], ...base, ...extra })}\n\n`
  const t = {
    cache_n: timings.cache_n,
    prompt_n: timings.prompt_n,
    prompt_ms: 12.3,
    prompt_per_token_ms: 0.88,
    prompt_per_second: 1138.2,
    predicted_n: timings.predicted_n,
    predicted_ms: 80.1,
    predicted_per_token_ms: 8.9,
    predicted_per_second: 112.3,
  }
  return [
    chunk({ role: 'assistant', content: null }, null),
    ...WORDS.map((w) => chunk({ content: w }, null)),
    chunk({}, 'stop', usage === undefined ? { timings: t } : { usage: { ...usage, total_tokens: usage.completion_tokens + usage.prompt_tokens }, timings: t }),
    'data: [DONE]\n\n',
  ].join('')
}

/** An upstream that streams `body` in reads of two events, 5 ms apart. */
async function sseUpstream(t: Test, body: string, contentType = 'text/event-stream') {
  const events = sseEvents(body)
  const up = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': contentType })
    const pieces = []
    for (let i = 0; i < events.length; i += 2) pieces.push({ afterMs: 5, bytes: events.slice(i, i + 2).join('') })
    void replay(res, pieces)
  })
  t.teardown(() => up.close())
  return up
}

async function proxyTo(t: Test, upstream: string, provider = 'openai'): Promise<RunningProxy> {
  const proxy = await startProxy({ routes: [{ prefix: '/p', upstream, name: 'p', provider }] })
  t.teardown(() => proxy.close())
  return proxy
}

/** Streams one chat completion through the proxy with the OpenAI SDK; returns the text the client got. */
async function chat(proxy: RunningProxy, model: string): Promise<string> {
  const client = new OpenAI({ baseURL: `${proxy.url}/p/v1`, apiKey: 'sk-test', maxRetries: 0 })
  const stream = await client.chat.completions.create({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] })
  let text = ''
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? ''
  return text
}

const estimated = (): number => {
  const ctx = parserContext()
  return WORDS.reduce((s, w) => s + ctx.countTokens(w), 0)
}

/** N − k1 once the words' estimates are scaled to the reported total (what the proxy records). */
function itlCount(total: number): number {
  const ctx = parserContext()
  const log = new ChunkLog()
  for (const w of WORDS) log.add(0, ctx.countTokens(w), MarkKind.text, false)
  reconcileTokens(log, total)
  return total - log.tokens(0)
}

t.test('Groq: usage only in x_groq.usage is the reported count, not an estimate', async (t) => {
  t.not(estimated(), 12, 'the tokenizer would say otherwise')
  const up = await sseUpstream(t, groqStream(12, 31))
  const proxy = await proxyTo(t, up.url)
  t.equal(await chat(proxy, 'llama3-8b-8192'), WORDS.join(''))
  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { route: 'p', model: 'llama3-8b-8192' }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 12)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), 0)
  t.equal(sumOf(m, 'llm_input_tokens_total', labels), 31)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), WORDS.length - 1, 'one content chunk per word: the role and finish chunks are not content')
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), itlCount(12), 'ITL count = N − k1 after scaling to the reported 12')
  t.equal(line.output_source, 'usage')
  t.equal(line.output_tokens, 12)
})

t.test('llama.cpp: timings.predicted_n and prompt_n + cache_n on the last chunk without usage are the reported counts', async (t) => {
  const up = await sseUpstream(t, llamaCppStream({ predicted_n: 11, prompt_n: 5, cache_n: 9 }))
  const proxy = await proxyTo(t, up.url)
  t.equal(await chat(proxy, 'qwen2.5-7b-instruct'), WORDS.join(''))
  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { route: 'p', model: 'qwen2.5-7b-instruct' }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 11)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), 0)
  t.equal(sumOf(m, 'llm_input_tokens_total', labels), 14, 'the prompt tokens evaluated plus those reused from the cache')
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), itlCount(11))
  t.equal(line.output_source, 'usage')
})

t.test('llama.cpp: with usage next to timings on the last chunk, usage gives the counts', async (t) => {
  const up = await sseUpstream(t, llamaCppStream({ predicted_n: 10, prompt_n: 14, cache_n: 0 }, { completion_tokens: 10, prompt_tokens: 14 }))
  const proxy = await proxyTo(t, up.url)
  await chat(proxy, 'qwen2.5-7b-instruct')
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { route: 'p', model: 'qwen2.5-7b-instruct' }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 10)
  t.equal(sumOf(m, 'llm_input_tokens_total', labels), 14)
})

t.test('a server report never replaces a top-level usage seen earlier, and split reads give the same summary', async (t) => {
  // timings after the usage chunk (timings_per_token) must not override the provider's usage.
  const body = llamaCppStream({ predicted_n: 10, prompt_n: 14, cache_n: 0 }, { completion_tokens: 10, prompt_tokens: 14 }).replace(
    'data: [DONE]',
    `data: ${JSON.stringify({ choices: [], object: 'chat.completion.chunk', timings: { predicted_n: 99, prompt_n: 99 } })}\n\ndata: [DONE]`,
  )
  const whole = feed(new OpenAIChatParser(parserContext()), [Buffer.from(body)])
  t.same(whole.summary.usage, { output: 10, input: 14 })
  for (const at of [1, 50, 333, body.length - 7]) {
    const split = feed(new OpenAIChatParser(parserContext()), [Buffer.from(body.slice(0, at)), Buffer.from(body.slice(at))])
    t.same(split.summary.usage, whole.summary.usage, `split at ${at}`)
    t.equal(split.events.length, WORDS.length)
  }
})

t.test('a chunk learned as a template never hides a later chunk that carries timings or x_groq.usage', async (t) => {
  // Every chunk carries timings (llama.cpp `timings_per_token`): the last one's counts are the totals.
  const base = { id: 'c', object: 'chat.completion.chunk', model: 'm' }
  const events = WORDS.map((w, i) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: w } }], ...base, timings: { prompt_n: 3, predicted_n: i + 1 } })}\n\n`)
  const parsed = feed(
    new OpenAIChatParser(parserContext()),
    events.map((e) => Buffer.from(e)),
  )
  t.same(parsed.summary.usage, { output: WORDS.length, input: 3 })
  const groq = groqStream(12, 31)
  t.same(
    feed(
      new OpenAIChatParser(parserContext()),
      sseEvents(groq).map((e) => Buffer.from(e)),
    ).summary.usage,
    { output: 12, input: 31 },
  )
})

t.test('TGI native without details: the token events counted exactly, as source="stream"', async (t) => {
  // The recorded stream as TGI writes it when the request does not ask for `details`: the last
  // event has `"details":null` (router/src/server.rs: details only when parameters.details).
  const recorded = fixture('tgi/generate-stream-native.sse').toString('utf8')
  const body = recorded.replace(/"details":\{[^}]*\}/, '"details":null')
  t.not(body, recorded)
  const up = await sseUpstream(t, body)
  const proxy = await proxyTo(t, up.url, 'tgi')
  const res = await fetch(`${proxy.url}/p/generate_stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: 'Write about data science', parameters: { max_new_tokens: 150 } }),
  })
  t.equal(Buffer.from(await res.arrayBuffer()).toString('utf8'), body, 'the same bytes')
  const [line] = await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { route: 'p', provider: 'tgi' }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'stream' }), 150)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 0)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), 0)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), 149)
  t.equal(line.output_source, 'stream')
  t.equal(line.output_tokens, 150)
})
