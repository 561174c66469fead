import t from 'tap'
import fc from 'fast-check'
import { AnthropicMessagesParser } from '../../src/parsers/anthropic-messages.ts'
import { CohereChatParser } from '../../src/parsers/cohere.ts'
import { GeminiArrayParser, GeminiSseParser } from '../../src/parsers/gemini.ts'
import { OpenAIResponsesParser } from '../../src/parsers/openai-responses.ts'
import type { StreamParser } from '../../src/parsers/types.ts'
import { fixture, parserContext } from '../helpers/split-feed.ts'

// Whatever an upstream sends, a parser returns events and a summary; it never throws.

const PARSERS: [string, () => StreamParser, string][] = [
  ['OpenAI Responses', () => new OpenAIResponsesParser(parserContext('/v1/responses', 'text/event-stream', 4096)), 'openai-responses/responses-text-deltas.sse'],
  ['Anthropic Messages', () => new AnthropicMessagesParser(parserContext('/v1/messages', 'text/event-stream', 4096)), 'anthropic/messages-text-server-tool-then-tool-use.sse'],
  ['Gemini SSE', () => new GeminiSseParser(parserContext('/v1beta/models/g:streamGenerateContent', 'text/event-stream', 4096)), 'gemini/gemini-sse-function-call.sse'],
  ['Gemini JSON array', () => new GeminiArrayParser(parserContext('/v1beta/models/g:streamGenerateContent', 'application/json', 4096)), 'gemini/gemini-json-array-stream.json'],
  ['Cohere v2 chat', () => new CohereChatParser(parserContext('/v2/chat', 'text/event-stream', 4096)), 'cohere/chat-tool-plan-tool-calls.data.jsonl'],
]

/** Feeds the reads; true when nothing threw and every event is well formed. */
function survives(make: () => StreamParser, reads: Uint8Array[]): boolean {
  const parser = make()
  for (const read of reads) {
    for (const e of parser.push(read)) if (!(e.tokens >= 1) || !['text', 'reasoning', 'tool'].includes(e.kind)) return false
  }
  const summary = parser.end()
  return typeof summary === 'object' && summary !== null
}

for (const [name, make, sample] of PARSERS) {
  t.test(`${name}: random bytes never make the parser throw`, async (t) => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 8 }), (reads) => survives(make, reads)),
      { numRuns: 300 },
    )
    t.pass()
  })

  t.test(`${name}: a recorded stream with bytes flipped, dropped or repeated never makes the parser throw`, async (t) => {
    const bytes = fixture(sample)
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.nat(bytes.length - 1), fc.integer({ min: 0, max: 255 }), fc.constantFrom('flip', 'drop', 'repeat')), { maxLength: 12 }), fc.nat(200), (edits, cut) => {
        let body = Buffer.from(bytes)
        for (const [at, value, how] of edits) {
          if (how === 'flip') body[at % body.length] = value
          else if (how === 'drop') body = Buffer.concat([body.subarray(0, at % body.length), body.subarray((at % body.length) + 1)])
          else {
            // Repeats a run of 1 to 16 bytes in place: [0, end) then [start, …), so [start, end) twice.
            const start = at % body.length
            const end = Math.min(body.length, start + 1 + (value % 16))
            body = Buffer.concat([body.subarray(0, end), body.subarray(start)])
          }
        }
        const reads: Uint8Array[] = []
        for (let i = 0; i < body.length; i += cut + 1) reads.push(body.subarray(i, i + cut + 1))
        return survives(make, reads)
      }),
      { numRuns: 200 },
    )
    t.pass()
  })

  t.test(`${name}: JSON of every shape in the right framing never makes the parser throw`, async (t) => {
    const frame = name === 'Gemini JSON array' ? (v: unknown) => `[${JSON.stringify(v)}]` : (v: unknown) => `data: ${JSON.stringify(v)}\n\n`
    fc.assert(
      fc.property(fc.array(fc.jsonValue(), { maxLength: 5 }), (values) =>
        survives(
          make,
          values.map((v) => Buffer.from(frame(v))),
        ),
      ),
      { numRuns: 300 },
    )
    // Known keys holding the wrong types.
    const odd = [null, 1, 'x', [], {}, [null], { text: 1 }, { type: 'text_delta', text: 5 }]
    for (const v of odd) {
      const shapes = [
        { type: 'response.output_text.delta', delta: v },
        { type: 'response.completed', response: { usage: v, model: v, status: 'failed', error: v } },
        { type: 'content_block_delta', delta: v },
        { type: 'message_start', message: { model: v, usage: v } },
        { type: 'message_delta', usage: { output_tokens: v, input_tokens: v } },
        { candidates: v, usageMetadata: v, error: v },
        { candidates: [{ content: { parts: v } }], usageMetadata: { candidatesTokenCount: v, thoughtsTokenCount: v } },
        { candidates: [{ content: { parts: [{ text: v, thought: v, functionCall: { args: v } }] } }] },
        { type: 'content-delta', delta: { message: { content: v } } },
        { type: 'tool-call-delta', delta: { message: { tool_calls: v } } },
        { type: 'message-end', delta: { usage: { tokens: v, billed_units: v }, error: v } },
      ]
      t.ok(
        survives(
          make,
          shapes.map((s) => Buffer.from(frame(s))),
        ),
        JSON.stringify(v),
      )
    }
  })
}
