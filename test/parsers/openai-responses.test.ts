import t from 'tap'
import { OpenAIResponsesParser, summarizeResponsesBody } from '../../src/parsers/openai-responses.ts'
import { selectParser } from '../../src/parsers/registry.ts'
import { JsonBodyParser } from '../../src/parsers/json-body-parser.ts'
import { countByKind, feed, fixture, parserContext, splitDifferences, ssePayloads } from '../helpers/split-feed.ts'

const make = () => new OpenAIResponsesParser(parserContext('/v1/responses', 'text/event-stream'))

type Payload = { type: string; delta?: string }

/** Delta events with a non-empty delta, by type, counted from the payloads (not by the parser). */
function deltaCounts(payloads: unknown[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const p of payloads as Payload[]) if (p.type.endsWith('.delta') && typeof p.delta === 'string' && p.delta !== '') out[p.type] = (out[p.type] ?? 0) + 1
  return out
}

interface Case {
  file: string
  deltas: Record<string, number>
  kinds: Record<string, number>
  usage?: { output: number; input: number; reasoning: number; cacheRead: number }
  model: string
  error?: string
}

const CASES: Case[] = [
  {
    file: 'openai-responses/responses-text-deltas.sse',
    deltas: { 'response.output_text.delta': 7 },
    kinds: { text: 7 },
    usage: { output: 9, input: 278, reasoning: 0, cacheRead: 0 },
    model: 'gpt-4o-2024-08-06',
  },
  {
    file: 'openai-responses/responses-reasoning-item-function-call-usage.sse',
    deltas: { 'response.function_call_arguments.delta': 6 },
    kinds: { tool: 6 },
    usage: { output: 469, input: 53, reasoning: 448, cacheRead: 0 },
    model: 'gpt-5-2025-08-07',
  },
  {
    file: 'openai-responses/responses-reasoning-summary-then-text.sse',
    deltas: { 'response.reasoning_summary_text.delta': 383, 'response.output_text.delta': 271 },
    kinds: { reasoning: 383, text: 271 },
    usage: { output: 1680, input: 13, reasoning: 1408, cacheRead: 0 },
    model: 'o3-mini-2025-01-31',
  },
  {
    file: 'openai-responses/responses-error-then-failed.data.jsonl',
    deltas: {},
    kinds: {},
    model: 'gpt-5-nano-2025-08-07',
    error: 'insufficient_quota',
  },
  {
    file: 'openai-compatible/openrouter-responses-data-only-done.sse',
    deltas: { 'response.reasoning_text.delta': 26, 'response.output_text.delta': 1 },
    kinds: { reasoning: 26, text: 1 },
    usage: { output: 37, input: 78, reasoning: 22, cacheRead: 0 },
    model: 'openai/gpt-oss-20b',
  },
]

for (const c of CASES) {
  t.test(`${c.file}: one content event per non-empty delta, and the usage the stream reports`, async (t) => {
    const bytes = fixture(c.file)
    const payloads = ssePayloads(bytes)
    t.same(deltaCounts(payloads), c.deltas, 'the fixture holds the deltas its description names')
    const whole = feed(make, bytes)
    t.same(countByKind(whole.events), c.kinds, 'content events by kind')
    const expectedEvents = Object.values(c.deltas).reduce((a, b) => a + b, 0)
    t.equal(whole.events.length, expectedEvents, 'one content event per delta event')
    t.ok(
      whole.events.every((e) => e.tokens >= 1 && !e.exact),
      'every delta is estimated at one token or more',
    )
    t.same(whole.summary.usage, c.usage, 'usage as the terminal event reports it')
    t.equal(whole.summary.model, c.model)
    t.equal(whole.summary.error, c.error)
    t.equal(whole.summary.parseError, undefined, 'the parser never gave up')
    const split = splitDifferences(make, bytes, whole)
    t.equal(split.differing, 0, `the same events and summary at every split (${split.runs} runs)`, { first: split.first })
  })
}

t.test('reasoning summary deltas all come before the answer text, as the stream sends them', async (t) => {
  const { events } = feed(make, fixture('openai-responses/responses-reasoning-summary-then-text.sse'))
  const firstText = events.findIndex((e) => e.kind === 'text')
  t.equal(firstText, 383)
  t.ok(events.slice(firstText).every((e) => e.kind === 'text'))
})

t.test('a response.failed without an earlier error event is an error by its own code', async (t) => {
  const body = Buffer.from('event: response.failed\ndata: {"type":"response.failed","response":{"status":"failed","model":"gpt-4o","error":{"code":"server_error","message":"boom"},"usage":null}}\n\n')
  const { summary } = feed(make, body)
  t.equal(summary.error, 'server_error')
  t.equal(summary.model, 'gpt-4o')
  t.equal(summary.usage, undefined)
})

t.test('an error event with flat fields, refusal and custom tool deltas are read; empty deltas are not content', async (t) => {
  const body = Buffer.from(
    [
      '{"type":"response.output_text.delta","delta":""}',
      '{"type":"response.refusal.delta","delta":"I cannot"}',
      '{"type":"response.custom_tool_call_input.delta","delta":"print(1)"}',
      '{"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":3,"output_tokens":4}}}',
      '{"type":"error","code":"rate_limit_exceeded","message":"slow down"}',
    ]
      .map((l) => `data: ${l}\n\n`)
      .join(''),
  )
  const { events, summary } = feed(make, body)
  t.same(countByKind(events), { text: 1, tool: 1 })
  t.same(summary.usage, { output: 4, input: 3 })
  t.equal(summary.error, 'rate_limit_exceeded')
})

t.test('bad JSON stops measuring quietly', async (t) => {
  const { events, summary } = feed(make, Buffer.from('data: {"type":"response.output_text.delta","delta":"a"}\n\ndata: {oops\n\ndata: {"type":"response.output_text.delta","delta":"b"}\n\n'))
  t.equal(events.length, 1)
  t.match(summary.parseError, /invalid JSON/)
})

t.test('a non-streamed Responses answer gives its usage and model', async (t) => {
  const answer = {
    id: 'resp_1',
    object: 'response',
    status: 'completed',
    model: 'gpt-4.1',
    output: [{ type: 'message', content: [{ type: 'output_text', text: 'hi' }] }],
    usage: { input_tokens: 12, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 17 },
  }
  t.same(summarizeResponsesBody(answer), { model: 'gpt-4.1', usage: { output: 5, input: 12, reasoning: 0 } })
  t.same(summarizeResponsesBody({ status: 'failed', error: { code: 'server_error' } }), { error: 'server_error' })
  t.same(summarizeResponsesBody('nope'), {})
})

t.test('a route labelled openai reads /v1/responses with the Responses parser, SSE or JSON', async (t) => {
  const ctx = parserContext('/v1/responses', 'text/event-stream')
  for (const setting of ['auto', 'openai']) {
    const sse = selectParser(setting, '/v1/responses', 'text/event-stream; charset=utf-8', ctx)
    t.equal(sse.provider, 'openai')
    t.ok(sse.parser instanceof OpenAIResponsesParser, `${setting}: SSE`)
    const json = selectParser(setting, '/v1/responses', 'application/json', { ...ctx, contentType: 'application/json' })
    t.ok(json.parser instanceof JsonBodyParser, `${setting}: JSON`)
  }
  t.equal(selectParser('auto', '/openai/v1/responses', 'text/event-stream', ctx).provider, 'openai', 'Azure v1 path')
  t.equal(selectParser('auto', '/v1/responses', 'text/plain', ctx).parser, undefined, 'nothing to read in plain text')
})
