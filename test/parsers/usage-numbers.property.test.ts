import t from 'tap'
import fc from 'fast-check'
import { AnthropicMessagesParser, summarizeAnthropicBody } from '../../src/parsers/anthropic-messages.ts'
import { BedrockParser, summarizeBedrockBody } from '../../src/parsers/bedrock.ts'
import { CohereChatParser, summarizeCohereBody } from '../../src/parsers/cohere.ts'
import { GeminiSseParser, summarizeGeminiBody } from '../../src/parsers/gemini.ts'
import { OllamaParser, summarizeOllamaBody } from '../../src/parsers/ollama.ts'
import { summarizeOpenAIBody } from '../../src/parsers/openai-body.ts'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { OpenAIResponsesParser, summarizeResponsesBody } from '../../src/parsers/openai-responses.ts'
import { summarizeTgiBody, TgiParser } from '../../src/parsers/tgi.ts'
import { MAX_COUNT } from '../../src/parsers/json.ts'
import type { StreamParser, StreamSummary } from '../../src/parsers/types.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { frame } from '../helpers/eventstream.ts'
import { parserContext } from '../helpers/split-feed.ts'

// Every provider's reported counts, fed any JSON value an upstream could send (numbers of every
// size and sign, fractions, exponents past a double, strings, null, objects): the measurement's
// token figures stay finite, non-negative integers, exact for a valid count, and the stream's own
// count (with a parse error) for anything else.

/** `@` in a case's text is where the value under test goes, as raw JSON text. */
interface Case {
  readonly name: string
  /** The field under test is the output count (else the input count). */
  readonly output: boolean
  readonly parser?: () => StreamParser
  /** The response bytes with the value's JSON text in place of `@`. */
  readonly stream?: (value: string) => Buffer
  /** A whole answer's summary (JSON.parse of the text with the value in place of `@`). */
  readonly body?: (value: unknown) => StreamSummary
  readonly bodyText?: string
}

const sse =
  (events: readonly string[]): ((v: string) => Buffer) =>
  (v) =>
    Buffer.from(events.map((e) => `data: ${e.replaceAll('@', () => v)}\n\n`).join(''))
const chat = (content: string): string => `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"${content}"},"finish_reason":null}]}`
const CHAT = [chat('one'), chat(' two'), chat(' three')]
const RESP = ['{"type":"response.output_text.delta","delta":"one"}', '{"type":"response.output_text.delta","delta":" two"}', '{"type":"response.output_text.delta","delta":" three"}']
const ANTH = [0, 1, 2].map((i) => `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${['one', ' two', ' three'][i]}"}}`)
const GEM = (usage: string): string[] => [
  '{"candidates":[{"content":{"parts":[{"text":"one"}],"role":"model"}}]}',
  '{"candidates":[{"content":{"parts":[{"text":" two"}],"role":"model"}}]}',
  `{"candidates":[{"content":{"parts":[{"text":" three"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":${usage}}`,
]
const COH = ['one', ' two', ' three'].map((x) => `{"type":"content-delta","index":0,"delta":{"message":{"content":{"text":"${x}"}}}}`)
const TGI = [1, 2, 3].map((i) => `{"index":${i},"token":{"id":${i},"text":"t${i}","logprob":-0.1,"special":false},"generated_text":null,"details":null}`)
const ollama = (last: string) => (v: string) =>
  Buffer.from(`${['one', ' two', ' three'].map((x) => `{"model":"m","message":{"role":"assistant","content":"${x}"},"done":false}\n`).join('')}${last.replaceAll('@', () => v)}\n`)
const bedrock = (usage: string) => (v: string) =>
  Buffer.concat([
    ...['one', ' two', ' three'].map((x) =>
      frame({ ':event-type': 'contentBlockDelta', ':content-type': 'application/json', ':message-type': 'event' }, `{"contentBlockIndex":0,"delta":{"text":"${x}"},"p":"a"}`),
    ),
    frame({ ':event-type': 'metadata', ':content-type': 'application/json', ':message-type': 'event' }, `{"usage":${usage.replaceAll('@', () => v)},"metrics":{"latencyMs":1},"p":"a"}`),
  ])

const p = (path: string, type: string) => () => parserContext(path, type)
const CASES: readonly Case[] = [
  {
    name: 'OpenAI chat completion_tokens',
    output: true,
    parser: () => new OpenAIChatParser(p('/v1/chat/completions', 'text/event-stream')()),
    stream: sse([...CHAT, '{"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":@}}']),
  },
  {
    name: 'OpenAI chat prompt_tokens',
    output: false,
    parser: () => new OpenAIChatParser(p('/v1/chat/completions', 'text/event-stream')()),
    stream: sse([...CHAT, '{"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":@,"completion_tokens":3}}']),
  },
  {
    name: 'OpenAI chat continuous usage (vLLM)',
    output: true,
    parser: () => new OpenAIChatParser(p('/v1/chat/completions', 'text/event-stream')()),
    stream: sse(CHAT.map((c, i) => c.replace('"choices"', `"usage":{"completion_tokens":${i === 2 ? '@' : i + 1}},"choices"`))),
  },
  {
    name: 'llama.cpp timings.predicted_n',
    output: true,
    parser: () => new OpenAIChatParser(p('/v1/chat/completions', 'text/event-stream')()),
    stream: sse([...CHAT, '{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"prompt_n":4,"predicted_n":@}}']),
  },
  {
    name: 'llama.cpp timings.prompt_n',
    output: false,
    parser: () => new OpenAIChatParser(p('/v1/chat/completions', 'text/event-stream')()),
    stream: sse([...CHAT, '{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"prompt_n":@,"predicted_n":3}}']),
  },
  {
    name: 'Groq x_groq.usage',
    output: true,
    parser: () => new OpenAIChatParser(p('/v1/chat/completions', 'text/event-stream')()),
    stream: sse([...CHAT, '{"id":"c","model":"m","choices":[],"x_groq":{"usage":{"prompt_tokens":2,"completion_tokens":@}}}']),
  },
  {
    name: 'OpenAI Responses output_tokens',
    output: true,
    parser: () => new OpenAIResponsesParser(p('/v1/responses', 'text/event-stream')()),
    stream: sse([...RESP, '{"type":"response.completed","response":{"model":"m","status":"completed","usage":{"input_tokens":5,"output_tokens":@}}}']),
  },
  {
    name: 'OpenAI Responses input_tokens',
    output: false,
    parser: () => new OpenAIResponsesParser(p('/v1/responses', 'text/event-stream')()),
    stream: sse([...RESP, '{"type":"response.completed","response":{"model":"m","status":"completed","usage":{"input_tokens":@,"output_tokens":3}}}']),
  },
  {
    name: 'Anthropic message_delta output_tokens',
    output: true,
    parser: () => new AnthropicMessagesParser(p('/v1/messages', 'text/event-stream')()),
    stream: sse([...ANTH, '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":@}}']),
  },
  {
    name: 'Anthropic message_start input_tokens',
    output: false,
    parser: () => new AnthropicMessagesParser(p('/v1/messages', 'text/event-stream')()),
    stream: sse(['{"type":"message_start","message":{"model":"m","usage":{"input_tokens":@,"output_tokens":1}}}', ...ANTH]),
  },
  {
    name: 'Gemini candidatesTokenCount',
    output: true,
    parser: () => new GeminiSseParser(p('/v1beta/models/g:streamGenerateContent', 'text/event-stream')()),
    stream: sse(GEM('{"promptTokenCount":2,"candidatesTokenCount":@}')),
  },
  {
    name: 'Gemini promptTokenCount',
    output: false,
    parser: () => new GeminiSseParser(p('/v1beta/models/g:streamGenerateContent', 'text/event-stream')()),
    stream: sse(GEM('{"promptTokenCount":@,"candidatesTokenCount":3}')),
  },
  {
    name: 'Cohere tokens.output_tokens',
    output: true,
    parser: () => new CohereChatParser(p('/v2/chat', 'text/event-stream')()),
    stream: sse([...COH, '{"type":"message-end","delta":{"finish_reason":"COMPLETE","usage":{"tokens":{"input_tokens":2,"output_tokens":@}}}}']),
  },
  {
    name: 'TGI details.generated_tokens',
    output: true,
    parser: () => new TgiParser(p('/generate_stream', 'text/event-stream')()),
    stream: sse([...TGI, '{"index":4,"token":{"id":2,"text":"</s>","logprob":0,"special":true},"generated_text":"x","details":{"finish_reason":"eos_token","generated_tokens":@}}']),
  },
  {
    name: 'Ollama eval_count',
    output: true,
    parser: () => new OllamaParser(p('/api/chat', 'application/x-ndjson')()),
    stream: ollama('{"model":"m","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":2,"eval_count":@,"eval_duration":@}'),
  },
  {
    name: 'Ollama prompt_eval_count',
    output: false,
    parser: () => new OllamaParser(p('/api/chat', 'application/x-ndjson')()),
    stream: ollama('{"model":"m","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":@,"eval_count":3,"eval_duration":0}'),
  },
  {
    name: 'Bedrock ConverseStream outputTokens',
    output: true,
    parser: () => new BedrockParser(p('/model/m/converse-stream', 'application/vnd.amazon.eventstream')()),
    stream: bedrock('{"inputTokens":2,"outputTokens":@}'),
  },
  {
    name: 'Bedrock ConverseStream inputTokens',
    output: false,
    parser: () => new BedrockParser(p('/model/m/converse-stream', 'application/vnd.amazon.eventstream')()),
    stream: bedrock('{"inputTokens":@,"outputTokens":3}'),
  },
  { name: 'OpenAI whole answer', output: true, body: summarizeOpenAIBody, bodyText: '{"model":"m","usage":{"prompt_tokens":1,"completion_tokens":@}}' },
  { name: 'Responses whole answer', output: true, body: summarizeResponsesBody, bodyText: '{"object":"response","model":"m","status":"completed","usage":{"input_tokens":1,"output_tokens":@}}' },
  { name: 'Anthropic whole answer', output: true, body: summarizeAnthropicBody, bodyText: '{"type":"message","model":"m","usage":{"input_tokens":1,"output_tokens":@}}' },
  { name: 'Gemini whole answer', output: true, body: summarizeGeminiBody, bodyText: '{"candidates":[],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":@}}' },
  { name: 'Cohere whole answer', output: true, body: summarizeCohereBody, bodyText: '{"id":"x","usage":{"tokens":{"input_tokens":1,"output_tokens":@}}}' },
  { name: 'Ollama whole answer', output: true, body: summarizeOllamaBody, bodyText: '{"model":"m","done":true,"eval_count":@,"eval_duration":@}' },
  { name: 'TGI whole answer', output: true, body: summarizeTgiBody, bodyText: '{"generated_text":"x","details":{"generated_tokens":@}}' },
  { name: 'Bedrock whole answer', output: true, body: summarizeBedrockBody, bodyText: '{"usage":{"inputTokens":1,"outputTokens":@}}' },
]

/** JSON text of any value an upstream could put in a count field. */
const VALUE = fc.oneof(
  fc.integer({ min: 0, max: 5000 }).map(String),
  fc.integer().map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
  fc.bigInt({ min: -(10n ** 40n), max: 10n ** 40n }).map(String),
  fc.integer({ min: -400, max: 400 }).map((e) => `1e${e}`),
  fc.constantFrom('1e309', '-1e309', '1e30', '-0', '0.0', '1000000000', '1000000001', String(2 ** 53), String(2 ** 60), '1.5', '3.0', 'null', 'true', '"12"', '{}', '[3]', '""'),
  fc.string({ maxLength: 8 }).map((s) => JSON.stringify(s)),
)

/** Whether the JSON text is a count the proxy may use. */
const isValid = (text: string): boolean => {
  const v: unknown = JSON.parse(text)
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= MAX_COUNT
}

function measured(c: Case, text: string): { output: number; input: number | undefined; fromUsage: boolean; parseError: string | undefined } {
  let summary: StreamSummary
  const chunks = new ChunkLog()
  if (c.parser !== undefined && c.stream !== undefined) {
    const parser = c.parser()
    for (const [i, e] of parser.push(c.stream(text)).entries()) chunks.add(10 * (i + 1), e.tokens, MarkKind.text, e.exact)
    summary = parser.end()
  } else {
    summary = (c.body as (v: unknown) => StreamSummary)(JSON.parse((c.bodyText as string).replaceAll('@', () => text)))
  }
  const m = measure({ tReq: 0, tEnd: 100, tHeaders: 1, statusCode: 200, failure: undefined, clientGone: false, chunks, summary, stallSeconds: 1 })
  return { output: m.outputTokens, input: m.inputTokens, fromUsage: m.outputSource === 'usage', parseError: m.parseError }
}

const isFigure = (n: number | undefined): boolean => n === undefined || (Number.isSafeInteger(n) && n >= 0 && n <= 3 * MAX_COUNT)

for (const c of CASES) {
  t.test(`${c.name}: any JSON value gives finite, non-negative token figures, exact when it is a count`, async (t) => {
    const baseline = measured(c, 'null')
    fc.assert(
      fc.property(VALUE, (text) => {
        const m = measured(c, text)
        if (!isFigure(m.output) || !isFigure(m.input)) return false
        const value: unknown = JSON.parse(text)
        if (isValid(text)) {
          if (c.output) return m.output === value && m.fromUsage
          return m.input === value
        }
        // Not a count: not reported, the same figures as without it, and noted unless absent.
        if (c.output ? m.output !== baseline.output || m.fromUsage !== baseline.fromUsage : m.input !== baseline.input) return false
        return value === null || m.parseError !== undefined
      }),
      { numRuns: 400 },
    )
    t.pass()
  })
}
