import t from 'tap'
import { CohereChatParser, summarizeCohereBody } from '../../src/parsers/cohere.ts'
import { JsonBodyParser } from '../../src/parsers/json-body-parser.ts'
import { providerForPath, selectParser } from '../../src/parsers/registry.ts'
import { countByKind, feed, fixture, parserContext, splitDifferences, ssePayloads } from '../helpers/split-feed.ts'

const make = () => new CohereChatParser(parserContext('/v2/chat', 'text/event-stream'))

/**
 * Cohere writes each event's type twice, as the SSE event name and as the JSON `type`; the
 * recorder kept only the data lines, so the wire framing is put back from the payload.
 */
function withEventNames(bytes: Buffer): Buffer {
  return Buffer.from((ssePayloads(bytes) as { type: string }[]).map((p) => `event: ${p.type}\ndata: ${JSON.stringify(p)}\n\n`).join(''))
}

interface Case {
  file: string
  /** Events by `type` whose delta carries output, counted from the payloads. */
  deltas: Record<string, number>
  kinds: Record<string, number>
  usage: { output: number; input: number }
}

const CASES: Case[] = [
  { file: 'cohere/chat-text.data.jsonl', deltas: { 'content-delta': 7 }, kinds: { text: 7 }, usage: { output: 10, input: 507 } },
  // The tool plan is text the model writes before its calls; each call's first (`tool-call-start`) arguments are "".
  { file: 'cohere/chat-tool-plan-tool-calls.data.jsonl', deltas: { 'tool-plan-delta': 27, 'tool-call-delta': 14 }, kinds: { reasoning: 27, tool: 14 }, usage: { output: 95, input: 1549 } },
]

type Payload = { type: string; delta?: { message?: { content?: { text?: string }; tool_plan?: string; tool_calls?: { function?: { arguments?: string } } } } }

function deltaCounts(payloads: unknown[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const p of payloads as Payload[]) {
    const m = p.delta?.message
    const text = p.type === 'content-delta' ? m?.content?.text : p.type === 'tool-plan-delta' ? m?.tool_plan : p.type === 'tool-call-delta' ? m?.tool_calls?.function?.arguments : undefined
    if (text !== undefined && text !== '') out[p.type] = (out[p.type] ?? 0) + 1
  }
  return out
}

for (const c of CASES) {
  for (const framing of ['data lines only', 'event names and data'] as const) {
    t.test(`${c.file} (${framing}): one content event per delta with output, usage from message-end, at every split`, async (t) => {
      const recorded = fixture(c.file)
      const bytes = framing === 'data lines only' ? recorded : withEventNames(recorded)
      t.same(deltaCounts(ssePayloads(bytes)), c.deltas, 'the fixture holds the deltas its description names')
      const whole = feed(make, bytes)
      t.same(countByKind(whole.events), c.kinds)
      t.ok(whole.events.every((e) => e.tokens >= 1 && !e.exact))
      t.same(whole.summary.usage, c.usage, 'usage.tokens, not the billed units')
      t.equal(whole.summary.model, undefined, 'a Cohere stream names no model')
      t.equal(whole.summary.error, undefined)
      t.equal(whole.summary.parseError, undefined)
      const split = splitDifferences(make, bytes, whole)
      t.equal(split.differing, 0, `the same events and summary at every split (${split.runs} runs)`, { first: split.first })
    })
  }
}

const sse = (events: unknown[]): Buffer => Buffer.from(events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join(''))

t.test('thinking deltas are reasoning, and the billed units stand in when the token counts are missing', async (t) => {
  const body = sse([
    { type: 'content-start', index: 0, delta: { message: { content: { type: 'thinking', thinking: '' } } } },
    { type: 'content-delta', index: 0, delta: { message: { content: { thinking: 'The user asks' } } } },
    { type: 'content-delta', index: 1, delta: { message: { content: { text: 'Four.' } } } },
    { type: 'content-delta', index: 1, delta: { message: { content: { text: '' } } } },
    { type: 'message-end', delta: { finish_reason: 'COMPLETE', usage: { billed_units: { input_tokens: 8, output_tokens: 50 } } } },
  ])
  const { events, summary } = feed(make, body)
  t.same(countByKind(events), { reasoning: 1, text: 1 })
  t.same(summary.usage, { output: 50, input: 8 })
})

t.test('an error on message-end is a provider error; the deltas before it still count', async (t) => {
  const body = sse([
    { type: 'content-delta', index: 0, delta: { message: { content: { text: 'Hel' } } } },
    { type: 'message-end', delta: { error: 'internal server error', finish_reason: 'ERROR' } },
  ])
  const { events, summary } = feed(make, body)
  t.equal(events.length, 1)
  t.equal(summary.error, 'internal server error')
  t.equal(summary.usage, undefined)
})

t.test('events of other shapes are not content and stop nothing', async (t) => {
  const body = sse([
    { type: 'citation-start', index: 0, delta: { message: { citations: { start: 0, end: 3, text: 'abc' } } } },
    { type: 'content-delta', delta: 'nope' },
    { type: 'tool-call-delta', delta: { message: { tool_calls: { function: { arguments: 7 } } } } },
    { type: 'message-end', delta: 'nope' },
    { type: 'debug', prompt: 'x' },
  ])
  const { events, summary } = feed(make, Buffer.concat([body, Buffer.from('data: [1,2]\n\n')]))
  t.equal(events.length, 0)
  t.same(summary, {})
})

t.test('a whole /v2/chat answer gives its usage', async (t) => {
  t.same(
    summarizeCohereBody({
      id: 'x',
      finish_reason: 'COMPLETE',
      message: { role: 'assistant', content: [{ type: 'text', text: 'Hi' }] },
      usage: { billed_units: { input_tokens: 3, output_tokens: 2 }, tokens: { input_tokens: 70, output_tokens: 3 } },
    }),
    { usage: { output: 3, input: 70 } },
  )
  t.same(summarizeCohereBody({ message: 'invalid api token' }), {})
  t.same(summarizeCohereBody(null), {})
})

t.test('/v2/chat is Cohere, streamed or whole, behind any prefix', async (t) => {
  const ctx = parserContext('/v2/chat', 'text/event-stream')
  const s = selectParser('auto', '/v2/chat', 'text/event-stream', ctx)
  t.equal(s.provider, 'cohere')
  t.ok(s.parser instanceof CohereChatParser)
  t.ok(selectParser('auto', '/v2/chat', 'application/json', ctx).parser instanceof JsonBodyParser)
  t.equal(selectParser('cohere', '/v2/chat', 'text/html', ctx).parser, undefined)
  t.equal(providerForPath('auto', '/compatibility/v2/chat')?.name, 'cohere')
  t.not(providerForPath('auto', '/v1/chat/completions')?.name, 'cohere')
  t.not(providerForPath('auto', '/v2/chat/completions')?.name, 'cohere', 'an OpenAI-compatible path under /v2 is not Cohere')
})
