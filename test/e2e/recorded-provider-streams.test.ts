import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { replay, startUpstream } from '../helpers/upstream.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { feed, fixture, parserContext } from '../helpers/split-feed.ts'
import { AnthropicMessagesParser } from '../../src/parsers/anthropic-messages.ts'
import { GeminiArrayParser, GeminiSseParser } from '../../src/parsers/gemini.ts'
import { OpenAIResponsesParser } from '../../src/parsers/openai-responses.ts'
import type { StreamParser } from '../../src/parsers/types.ts'

// Real recorded provider streams, replayed by an upstream in uneven reads, through the proxy:
// the client gets the same bytes, and the metrics carry the stream's own usage and labels.

interface Case {
  file: string
  path: string
  contentType: string
  body: Record<string, unknown>
  provider: string
  model: string
  output: number
  input: number
  make: (path: string) => StreamParser
  error?: string
  /** N − k1 where the per-chunk counts are the provider's own (Gemini's advancing usage). */
  itlCount?: number
}

const CASES: Case[] = [
  {
    file: 'anthropic/messages-thinking-signature-text.sse',
    path: '/v1/messages',
    contentType: 'text/event-stream; charset=utf-8',
    body: { model: 'claude-sonnet-4-20250514', stream: true, max_tokens: 2048 },
    provider: 'anthropic',
    model: 'claude-sonnet-4-20250514',
    output: 282,
    input: 43,
    make: (path) => new AnthropicMessagesParser(parserContext(path, 'text/event-stream')),
  },
  {
    file: 'openai-responses/responses-reasoning-summary-then-text.sse',
    path: '/v1/responses',
    contentType: 'text/event-stream; charset=utf-8',
    body: { model: 'o3-mini', stream: true, input: 'x' },
    provider: 'openai',
    model: 'o3-mini',
    output: 1680,
    input: 13,
    make: (path) => new OpenAIResponsesParser(parserContext(path, 'text/event-stream')),
  },
  {
    file: 'gemini/gemini-sse-thinking-thought-parts.sse',
    path: '/v1beta/models/gemini-2.5-pro:streamGenerateContent',
    contentType: 'text/event-stream',
    body: { contents: [] },
    provider: 'gemini',
    model: 'gemini-2.5-pro',
    output: 1256,
    input: 34,
    // Exact per-chunk counts: the first (thought) chunk advanced thoughtsTokenCount to 68.
    itlCount: 1256 - 68,
    make: (path) => new GeminiSseParser(parserContext(path, 'text/event-stream')),
  },
  {
    file: 'gemini/gemini-json-array-stream.json',
    path: '/v1beta/models/gemini-2.0-flash:streamGenerateContent',
    contentType: 'application/json; charset=UTF-8',
    body: { contents: [] },
    provider: 'gemini',
    model: 'gemini-2.0-flash',
    output: 578,
    input: 8,
    make: (path) => new GeminiArrayParser(parserContext(path, 'application/json')),
  },
  {
    file: 'openai-responses/responses-error-then-failed.data.jsonl',
    path: '/v1/responses',
    contentType: 'text/event-stream',
    body: { model: 'gpt-5-nano', stream: true, input: 'x' },
    provider: 'openai',
    model: 'gpt-5-nano',
    output: 0,
    input: 0,
    make: (path) => new OpenAIResponsesParser(parserContext(path, 'text/event-stream')),
    error: 'insufficient_quota',
  },
]

for (const c of CASES) {
  t.test(`${c.file} through the proxy: the same bytes, the stream's usage, provider ${c.provider} and model ${c.model}`, async (t) => {
    const bytes = fixture(c.file)
    // Uneven reads that cut events anywhere, a few ms apart.
    const pieces: { afterMs: number; bytes: Buffer }[] = []
    for (let at = 0, i = 0; at < bytes.length; i++) {
      const size = 1 + ((i * 7919) % 1500)
      pieces.push({ afterMs: 2, bytes: bytes.subarray(at, at + size) })
      at += size
    }
    const upstream = await startUpstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': c.contentType })
      await replay(res, pieces)
    })
    t.teardown(() => upstream.close())
    const proxy = await startProxy({ routes: [{ prefix: '/p', upstream: upstream.url }] })
    t.teardown(() => proxy.close())

    const res = await fetch(`${proxy.url}/p${c.path}?alt=sse&key=secret-key`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(c.body) })
    const received = Buffer.from(await res.arrayBuffer())
    t.ok(received.equals(bytes), 'the client received the recorded bytes unchanged')
    t.equal(upstream.requests[0].url, `${c.path}?alt=sse&key=secret-key`, 'the path and query reached the upstream')

    const [line] = await proxy.waitForRequests(1)
    const labels = { provider: c.provider, model: c.model, route: '/p' }
    const m = await proxy.scrape()
    const events = feed(() => c.make(c.path), bytes).events.length
    t.equal(line.chunks, events, 'one content chunk per content event of the recording')
    t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), events > 0 ? 1 : 0)
    t.equal(line.error, c.error)
    t.equal(line.outcome, c.error === undefined ? 'ok' : 'error')
    if (c.output > 0) {
      t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), c.output, 'output tokens as the stream reports them')
      t.equal(sumOf(m, 'llm_input_tokens_total', labels), c.input, 'input tokens as the stream reports them')
      t.equal(line.output_source, 'usage')
    }
    if (c.itlCount !== undefined) t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), c.itlCount, 'ITL count = N − k1 from the provider counts')
    t.notMatch(JSON.stringify(line), /secret-key/, 'the key in the query is never logged')
  })
}
