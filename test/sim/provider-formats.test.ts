import t from 'tap'
import type { AddressInfo } from 'node:net'
import { validateConfig } from '../../src/config/load-config.ts'
import type { SimulatorConfig } from '../../src/config/schema.ts'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import { AnthropicMessagesParser } from '../../src/parsers/anthropic-messages.ts'
import { CohereChatParser, summarizeCohereBody } from '../../src/parsers/cohere.ts'
import { GeminiArrayParser, GeminiSseParser } from '../../src/parsers/gemini.ts'
import { OpenAIResponsesParser } from '../../src/parsers/openai-responses.ts'
import type { StreamParser } from '../../src/parsers/types.ts'
import { countTokens, feed, parserContext } from '../helpers/split-feed.ts'

// A plan the test knows: 2 tokens first, then 1 and 3: N = 6 in three content chunks.
const PLAN = {
  ttft_ms: 5,
  first_tokens: 2,
  chunks: [
    [5, 1],
    [5, 3],
  ],
}
const N = 6

async function startSim(t: { teardown(fn: () => unknown): void }, overrides: Record<string, unknown> = {}): Promise<string> {
  const cfg = validateConfig({ routes: [{ prefix: '/sim', simulator: { jitter_ms: 0, stall_probability: 0, burst_every: 0, ttft_ms: 1, itl_ms: 1, tokens: 5, ...overrides } }] }).routes[0]
    .simulator as SimulatorConfig
  const sim = buildSimulator(cfg)
  await sim.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => sim.close())
  return `http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`
}

/** `plan: null` asks for no explicit plan (the route's schedule). */
async function post(url: string, body: unknown, plan: unknown = PLAN): Promise<{ status: number; type: string; bytes: Buffer }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...(plan === null ? {} : { 'x-tokentap-sim': JSON.stringify(plan) }) }, body: JSON.stringify(body) })
  return { status: res.status, type: res.headers.get('content-type') ?? '', bytes: Buffer.from(await res.arrayBuffer()) }
}

function read(make: () => StreamParser, bytes: Buffer) {
  return feed(make, bytes)
}

const words = (text: string): number => countTokens(text)

t.test('the simulated Anthropic stream has the planned chunks and reports the planned usage', async (t) => {
  const url = await startSim(t)
  const r = await post(`${url}/v1/messages`, { model: 'claude-sim', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] })
  t.equal(r.status, 200)
  t.match(r.type, /^text\/event-stream/)
  const text = r.bytes.toString('utf8')
  for (const name of ['message_start', 'content_block_start', 'ping', 'content_block_stop', 'message_delta', 'message_stop']) t.match(text, `event: ${name}\n`)
  const { events, summary } = read(() => new AnthropicMessagesParser(parserContext('/v1/messages', r.type)), r.bytes)
  t.same(
    events.map((e) => e.tokens),
    [2, 1, 3],
    'one event per planned chunk, each word one token',
  )
  t.equal(summary.usage?.output, N)
  t.equal(summary.model, 'claude-sim')
  t.ok((summary.usage?.input ?? 0) >= 1)
})

t.test('the simulated Anthropic answer, whole, and its errors', async (t) => {
  const url = await startSim(t)
  const whole = await post(`${url}/v1/messages`, { model: 'claude-sim', max_tokens: 100, messages: [] })
  const answer = JSON.parse(whole.bytes.toString('utf8'))
  t.equal(answer.type, 'message')
  t.equal(words(answer.content[0].text), N)
  t.equal(answer.usage.output_tokens, N)
  const failed = await post(`${url}/v1/messages`, { max_tokens: 10, stream: true }, { ...PLAN, status: 529 })
  t.equal(failed.status, 529)
  t.same(JSON.parse(failed.bytes.toString('utf8')).error.type, 'overloaded_error')
  const midway = await post(`${url}/v1/messages`, { max_tokens: 10, stream: true }, { ...PLAN, error_after: 1 })
  const { events, summary } = read(() => new AnthropicMessagesParser(parserContext('/v1/messages', midway.type)), midway.bytes)
  t.equal(events.length, 1)
  t.equal(summary.error, 'overloaded_error')
  // max_tokens is mandatory in this API: a cap on the configured length (5), not the answer's length.
  const capped = JSON.parse((await post(`${url}/v1/messages`, { max_tokens: 1000, messages: [] }, null)).bytes.toString('utf8'))
  t.equal(capped.usage.output_tokens, 5)
  const smaller = JSON.parse((await post(`${url}/v1/messages`, { max_tokens: 3, messages: [] }, null)).bytes.toString('utf8'))
  t.equal(smaller.usage.output_tokens, 3)
})

t.test('the simulated Gemini stream, SSE and JSON array, counts each chunk exactly from its cumulative usage', async (t) => {
  const url = await startSim(t)
  const body = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }
  for (const base of [
    '/v1beta/models/gemini-sim',
    '/v1/projects/p/locations/us-central1/publishers/google/models/gemini-sim',
    '/v1beta1/projects/p/locations/global/publishers/google/models/gemini-sim',
  ]) {
    const path = `${base}:streamGenerateContent`
    const sse = await post(`${url}${path}?alt=sse`, body)
    t.equal(sse.status, 200, path)
    t.equal(sse.type, 'text/event-stream')
    t.match(sse.bytes.toString('utf8'), /\r\n\r\n$/, 'CRLF framing like Google')
    const s = read(() => new GeminiSseParser(parserContext(path, sse.type)), sse.bytes)
    t.same(
      s.events.map((e) => [e.tokens, e.exact]),
      [
        [2, true],
        [1, true],
        [3, true],
      ],
    )
    t.equal(s.summary.usage?.output, N)
    t.equal(s.summary.model, 'gemini-sim')
  }
  const path = '/v1beta/models/gemini-sim:streamGenerateContent'
  const array = await post(`${url}${path}`, body)
  t.match(array.type, /^application\/json/)
  const chunks = JSON.parse(array.bytes.toString('utf8'))
  t.equal(chunks.length, 3, 'a JSON array of the planned chunks')
  t.equal(chunks[2].candidates[0].finishReason, 'STOP')
  const a = read(() => new GeminiArrayParser(parserContext(path, 'application/json')), array.bytes)
  t.same(
    a.events.map((e) => e.tokens),
    [2, 1, 3],
  )
  t.equal(a.summary.usage?.output, N)
})

t.test('the simulated Gemini generateContent answer, errors and unknown methods', async (t) => {
  const url = await startSim(t)
  const whole = JSON.parse((await post(`${url}/v1/models/gemini-sim:generateContent`, { contents: [] })).bytes.toString('utf8'))
  t.equal(whole.usageMetadata.candidatesTokenCount, N)
  t.equal(words(whole.candidates[0].content.parts[0].text), N)
  const failed = await post(`${url}/v1beta/models/gemini-sim:streamGenerateContent?alt=sse`, {}, { ...PLAN, status: 429 })
  t.equal(failed.status, 429)
  t.equal(JSON.parse(failed.bytes.toString('utf8')).error.status, 'RESOURCE_EXHAUSTED')
  const path = '/v1beta/models/gemini-sim:streamGenerateContent'
  const sseError = await post(`${url}${path}?alt=sse`, {}, { ...PLAN, error_after: 2 })
  const s = read(() => new GeminiSseParser(parserContext(path, 'text/event-stream')), sseError.bytes)
  t.equal(s.events.length, 2)
  t.equal(s.summary.error, 'INTERNAL')
  for (const after of [0, 1]) {
    const arrayError = await post(`${url}${path}`, {}, { ...PLAN, error_after: after })
    const parsed = JSON.parse(arrayError.bytes.toString('utf8'))
    t.equal(parsed.length, after + 1, "the error is the array's last element")
    t.equal(read(() => new GeminiArrayParser(parserContext(path, 'application/json')), arrayError.bytes).summary.error, 'INTERNAL')
  }
  t.equal((await post(`${url}/v1beta/models/gemini-sim:countTokens`, {})).status, 404)
  const byConfig = JSON.parse((await post(`${url}/v1beta/models/g:generateContent`, { generationConfig: { maxOutputTokens: 7 } }, null)).bytes.toString('utf8'))
  t.equal(byConfig.usageMetadata.candidatesTokenCount, 7, 'maxOutputTokens sets the length, like max_tokens for chat')
})

t.test('the simulated Responses API stream and answer report the planned usage', async (t) => {
  const url = await startSim(t)
  const r = await post(`${url}/v1/responses`, { model: 'gpt-sim', input: 'hi', stream: true })
  t.equal(r.status, 200)
  const text = r.bytes.toString('utf8')
  for (const name of ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added', 'response.output_text.done', 'response.completed'])
    t.match(text, `event: ${name}\n`)
  const { events, summary } = read(() => new OpenAIResponsesParser(parserContext('/v1/responses', r.type)), r.bytes)
  t.same(
    events.map((e) => e.tokens),
    [2, 1, 3],
  )
  t.same(summary.usage, { output: N, input: summary.usage?.input, reasoning: 0, cacheRead: 0 })
  t.equal(summary.model, 'gpt-sim')
  const whole = JSON.parse((await post(`${url}/v1/responses`, { model: 'gpt-sim', input: 'hi', max_output_tokens: 50 })).bytes.toString('utf8'))
  t.equal(whole.object, 'response')
  t.equal(whole.usage.output_tokens, N)
  t.equal(words(whole.output[0].content[0].text), N)
  const midway = await post(`${url}/v1/responses`, { stream: true }, { ...PLAN, error_after: 1 })
  const m = read(() => new OpenAIResponsesParser(parserContext('/v1/responses', midway.type)), midway.bytes)
  t.equal(m.events.length, 1)
  t.equal(m.summary.error, 'server_error')
  const failed = await post(`${url}/v1/responses`, { stream: true }, { ...PLAN, status: 500 })
  t.equal(failed.status, 500)
})

t.test('the simulated Cohere v2 stream has the planned chunks, named events and the planned usage; whole answers and errors too', async (t) => {
  const url = await startSim(t)
  const r = await post(`${url}/v2/chat`, { model: 'command-sim', stream: true, messages: [{ role: 'user', content: 'hi' }] })
  t.equal(r.status, 200)
  t.equal(r.type, 'text/event-stream')
  const text = r.bytes.toString('utf8')
  for (const name of ['message-start', 'content-start', 'content-delta', 'content-end', 'message-end']) t.match(text, `event: ${name}\ndata: {`)
  const { events, summary } = read(() => new CohereChatParser(parserContext('/v2/chat', r.type)), r.bytes)
  t.same(
    events.map((e) => e.tokens),
    [2, 1, 3],
    'one event per planned chunk, each word one token',
  )
  t.equal(summary.usage?.output, N)
  t.ok((summary.usage?.input ?? 0) >= 1)
  const whole = JSON.parse((await post(`${url}/v2/chat`, { model: 'command-sim', messages: [] })).bytes.toString('utf8'))
  t.equal(whole.finish_reason, 'COMPLETE')
  t.equal(words(whole.message.content[0].text), N)
  t.equal(summarizeCohereBody(whole).usage?.output, N)
  const failed = await post(`${url}/v2/chat`, { stream: true }, { ...PLAN, status: 429 })
  t.equal(failed.status, 429)
  t.equal(JSON.parse(failed.bytes.toString('utf8')).message, 'simulated 429')
  const midway = await post(`${url}/v2/chat`, { stream: true }, { ...PLAN, error_after: 1 })
  const cut = read(() => new CohereChatParser(parserContext('/v2/chat', midway.type)), midway.bytes)
  t.equal(cut.events.length, 1)
  t.equal(cut.summary.error, 'simulated error inside the stream')
  const sized = JSON.parse((await post(`${url}/v2/chat`, { max_tokens: 3, messages: [] }, null)).bytes.toString('utf8'))
  t.equal(sized.usage.tokens.output_tokens, 3, 'max_tokens sizes the answer')
})
