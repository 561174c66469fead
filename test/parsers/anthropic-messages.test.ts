import t from 'tap'
import { AnthropicMessagesParser, summarizeAnthropicBody } from '../../src/parsers/anthropic-messages.ts'
import { selectParser, providerForPath } from '../../src/parsers/registry.ts'
import { JsonBodyParser } from '../../src/parsers/json-body-parser.ts'
import { countByKind, feed, fixture, parserContext, splitDifferences, ssePayloads } from '../helpers/split-feed.ts'

const make = () => new AnthropicMessagesParser(parserContext('/v1/messages', 'text/event-stream'))

type Payload = { type: string; delta?: { type: string; text?: string; thinking?: string; partial_json?: string } }

/** content_block_delta events that carry output, by delta type, counted from the payloads. */
function deltaCounts(payloads: unknown[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const p of payloads as Payload[]) {
    if (p.type !== 'content_block_delta' || p.delta === undefined) continue
    const text = p.delta.text ?? p.delta.thinking ?? p.delta.partial_json ?? ''
    if (text !== '') out[p.delta.type] = (out[p.delta.type] ?? 0) + 1
  }
  return out
}

interface Case {
  file: string
  deltas: Record<string, number>
  kinds: Record<string, number>
  usage: { output: number; input: number; cacheRead: number; cacheWrite: number; cacheWrite1h: number }
  model: string
}

const CASES: Case[] = [
  {
    file: 'anthropic/messages-text-ping-between-deltas.sse',
    deltas: { text_delta: 3 },
    kinds: { text: 3 },
    usage: { input: 15, output: 13, cacheRead: 0, cacheWrite: 0, cacheWrite1h: 0 },
    model: 'claude-3-opus-20240229',
  },
  {
    // The server tool's search grew the input: message_delta's cumulative 1591 replaces message_start's 702.
    file: 'anthropic/messages-text-server-tool-then-tool-use.sse',
    deltas: { text_delta: 4, input_json_delta: 16 },
    kinds: { text: 4, tool: 16 },
    usage: { input: 1591, output: 175, cacheRead: 0, cacheWrite: 0, cacheWrite1h: 0 },
    model: 'claude-sonnet-4-6',
  },
  {
    file: 'anthropic/messages-thinking-signature-text.sse',
    deltas: { thinking_delta: 13, text_delta: 95 },
    kinds: { reasoning: 13, text: 95 },
    usage: { input: 43, output: 282, cacheRead: 0, cacheWrite: 0, cacheWrite1h: 0 },
    model: 'claude-sonnet-4-20250514',
  },
]

for (const c of CASES) {
  t.test(`${c.file}: one content event per delta with output, and the usage the stream reports`, async (t) => {
    const bytes = fixture(c.file)
    t.same(deltaCounts(ssePayloads(bytes)), c.deltas, 'the fixture holds the deltas its description names')
    const whole = feed(make, bytes)
    t.same(countByKind(whole.events), c.kinds, 'content events by kind: pings, signatures and empty JSON fragments are not content')
    t.equal(
      whole.events.length,
      Object.values(c.deltas).reduce((a, b) => a + b, 0),
    )
    t.ok(whole.events.every((e) => e.tokens >= 1 && !e.exact))
    t.same(whole.summary.usage, c.usage, 'input with cache counts, cumulative output from message_delta')
    t.equal(whole.summary.model, c.model)
    t.equal(whole.summary.error, undefined)
    t.equal(whole.summary.parseError, undefined)
    const split = splitDifferences(make, bytes, whole)
    t.equal(split.differing, 0, `the same events and summary at every split (${split.runs} runs)`, { first: split.first })
  })
}

const sse = (events: [string, unknown][]): Buffer => Buffer.from(events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join(''))

t.test('an overloaded_error event mid-stream is a provider error; the deltas before it still count', async (t) => {
  const body = sse([
    ['message_start', { type: 'message_start', message: { model: 'claude-x', usage: { input_tokens: 10, cache_read_input_tokens: 5, cache_creation_input_tokens: 2, output_tokens: 1 } } }],
    ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } }],
    ['ping', { type: 'ping' }],
    ['error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }],
  ])
  const { events, summary } = feed(make, body)
  t.equal(events.length, 1)
  t.equal(summary.error, 'overloaded_error')
  t.same(summary.usage, { input: 17, cacheRead: 5, cacheWrite: 2 }, 'input = input + cache read + cache creation, each cache count as reported; the start placeholder is no output count')
})

t.test('cache_creation.ephemeral_1h_input_tokens is the part of the cache writes kept for an hour', async (t) => {
  // https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#1-hour-cache-duration
  const usage = { input_tokens: 10, cache_read_input_tokens: 0, cache_creation_input_tokens: 300, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 }, output_tokens: 1 }
  const body = sse([
    ['message_start', { type: 'message_start', message: { model: 'claude-x', usage } }],
    ['message_delta', { type: 'message_delta', delta: {}, usage: { output_tokens: 7 } }],
  ])
  t.same(feed(make, body).summary.usage, { input: 310, cacheRead: 0, cacheWrite: 300, cacheWrite1h: 200, output: 7 })
  const bad = sse([['message_start', { type: 'message_start', message: { usage: { ...usage, cache_creation: { ephemeral_1h_input_tokens: -3 } } } }]])
  t.same(feed(make, bad).summary.usage, { input: 310, cacheRead: 0, cacheWrite: 300 }, 'a count that is no count is not used')
})

t.test('a stream cut before message_delta reports no output count', async (t) => {
  const body = sse([['message_start', { type: 'message_start', message: { usage: { input_tokens: 4, output_tokens: 1 } } }]])
  t.same(feed(make, body).summary.usage, { input: 4 })
})

t.test('citations and signature deltas and non-object values are not content', async (t) => {
  const body = sse([
    ['content_block_delta', { type: 'content_block_delta', delta: { type: 'citations_delta', citation: {} } }],
    ['content_block_delta', { type: 'content_block_delta', delta: { type: 'signature_delta', signature: 'abc' } }],
    ['content_block_delta', { type: 'content_block_delta', delta: 'nope' }],
    ['message_start', { type: 'message_start', message: 'nope' }],
    ['x', [1, 2]],
  ])
  const { events, summary } = feed(make, body)
  t.equal(events.length, 0)
  t.equal(summary.parseError, undefined)
})

t.test('a non-streamed Messages answer gives its usage, model and errors', async (t) => {
  t.same(summarizeAnthropicBody({ type: 'message', model: 'claude-opus-4', usage: { input_tokens: 20, cache_read_input_tokens: 100, output_tokens: 42 } }), {
    model: 'claude-opus-4',
    usage: { input: 120, output: 42, cacheRead: 100 },
  })
  t.same(summarizeAnthropicBody({ type: 'error', error: { type: 'invalid_request_error', message: 'bad' } }), { error: 'invalid_request_error' })
  t.same(summarizeAnthropicBody(null), {})
})

t.test('Anthropic paths are detected, and OpenAI Assistants messages are not Anthropic', async (t) => {
  const ctx = parserContext('/v1/messages', 'text/event-stream')
  const s = selectParser('auto', '/v1/messages', 'text/event-stream; charset=utf-8', ctx)
  t.equal(s.provider, 'anthropic')
  t.ok(s.parser instanceof AnthropicMessagesParser)
  t.ok(selectParser('anthropic', '/v1/messages', 'application/json', ctx).parser instanceof JsonBodyParser)
  t.equal(selectParser('auto', '/v1/messages', 'text/html', ctx).parser, undefined)
  t.not(providerForPath('auto', '/v1/threads/th_1/messages')?.name, 'anthropic')
  const count = selectParser('auto', '/v1/messages/count_tokens', 'application/json', parserContext('/v1/messages/count_tokens', 'application/json'))
  t.equal(count.provider, 'anthropic', 'token counting is Anthropic too')
  t.equal(count.parser, undefined, 'but no completion to measure')
  const vertex = '/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict'
  const spec = providerForPath('auto', vertex)
  t.equal(spec?.name, 'anthropic', 'Claude on Vertex AI')
  t.equal(spec?.modelFromPath?.(vertex), 'claude-sonnet-4@20250514')
})
