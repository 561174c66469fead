import t from 'tap'
import { GeminiArrayParser, GeminiSseParser, geminiModelFromPath, summarizeGeminiBody } from '../../src/parsers/gemini.ts'
import { JsonBodyParser } from '../../src/parsers/json-body-parser.ts'
import { providerForPath, selectParser } from '../../src/parsers/registry.ts'
import type { StreamParser } from '../../src/parsers/types.ts'
import { countByKind, feed, fixture, parserContext, splitDifferences, ssePayloads } from '../helpers/split-feed.ts'

const PATH = '/v1beta/models/gemini-2.5-flash:streamGenerateContent'
const makeSse = () => new GeminiSseParser(parserContext(PATH, 'text/event-stream'))
const makeArray = () => new GeminiArrayParser(parserContext(PATH, 'application/json'))

interface Chunk {
  candidates?: { content?: { parts?: { text?: string; thought?: boolean; functionCall?: unknown }[] } }[]
  usageMetadata?: { promptTokenCount?: number; candidatesTokenCount?: number; thoughtsTokenCount?: number }
  modelVersion?: string
}

/** What the chunks say, worked out here from the payloads, not by the parser. */
function expected(chunks: Chunk[]) {
  const kinds: Record<string, number> = {}
  let content = 0
  const exactTokens: number[] = []
  let exact = true
  let cumulative = 0
  let thoughtsStreamed = false
  let last: Chunk['usageMetadata'] = {}
  for (const c of chunks) {
    const parts = c.candidates?.flatMap((x) => x.content?.parts ?? []) ?? []
    const text = parts.some((p) => p.text && !p.thought)
    const tool = parts.some((p) => p.functionCall)
    const thought = parts.some((p) => p.text && p.thought)
    if (thought) thoughtsStreamed = true
    const u = c.usageMetadata ?? {}
    // Thinking counted but not streamed is not in any chunk.
    const streamedThoughts = thoughtsStreamed ? u.thoughtsTokenCount : undefined
    const now = u.candidatesTokenCount === undefined && streamedThoughts === undefined ? undefined : (u.candidatesTokenCount ?? 0) + (streamedThoughts ?? 0)
    if (text || tool || thought) {
      content++
      const kind = text ? 'text' : tool ? 'tool' : 'reasoning'
      kinds[kind] = (kinds[kind] ?? 0) + 1
      if (exact && now !== undefined && now > cumulative) exactTokens.push(now - cumulative)
      else exact = false
    }
    if (now !== undefined && now > cumulative) cumulative = now
    if (c.usageMetadata) last = { ...last, ...c.usageMetadata }
  }
  const usage: Record<string, number> = {}
  if (last.candidatesTokenCount !== undefined || last.thoughtsTokenCount !== undefined) usage.output = (last.candidatesTokenCount ?? 0) + (last.thoughtsTokenCount ?? 0)
  if (last.promptTokenCount !== undefined) usage.input = last.promptTokenCount
  if (last.thoughtsTokenCount !== undefined) usage.reasoning = last.thoughtsTokenCount
  return { kinds, content, exactTokens: exact ? exactTokens : undefined, thoughtsStreamed, usage, model: chunks.find((c) => c.modelVersion)?.modelVersion }
}

interface Case {
  file: string
  make: () => StreamParser
  kinds: Record<string, number>
  /** Per-chunk exact counts (cumulative usage advanced on every content chunk), else undefined. */
  exact?: number[]
  usage: { output: number; input: number; reasoning?: number }
}

const CASES: Case[] = [
  // candidatesTokenCount only on the last chunk: estimates; the prompt count changes 15 → 13.
  { file: 'gemini/gemini-sse-crlf-text.sse', make: makeSse, kinds: { text: 3 }, usage: { output: 8, input: 13 } },
  // Thinking counted (35) but not streamed: the chunks hold the 80 candidate tokens, 31/48/1.
  { file: 'gemini/gemini-sse-cumulative-usage.sse', make: makeSse, kinds: { text: 3 }, exact: [31, 48, 1], usage: { output: 115, input: 18, reasoning: 35 } },
  { file: 'gemini/gemini-sse-function-call.sse', make: makeSse, kinds: { tool: 1 }, exact: [10], usage: { output: 212, input: 29, reasoning: 202 } },
  {
    file: 'gemini/gemini-sse-thinking-thought-parts.sse',
    make: makeSse,
    kinds: { reasoning: 4, text: 19 },
    exact: [68, 230, 254, 235, 23, 24, 27, 24, 27, 25, 23, 24, 26, 27, 24, 24, 24, 24, 27, 25, 26, 24, 21],
    usage: { output: 1256, input: 34, reasoning: 787 },
  },
  { file: 'gemini/vertex-sse-flex-tier.sse', make: makeSse, kinds: { text: 1 }, exact: [1], usage: { output: 101, input: 5, reasoning: 100 } },
  // Thought parts streamed: their chunks advance thoughtsTokenCount (68, 298, 552, 787), exact too.
  { file: 'gemini/gemini-json-array-stream.json', make: makeArray, kinds: { text: 13 }, usage: { output: 578, input: 8 } },
]

for (const c of CASES) {
  t.test(`${c.file}: one content event per chunk with output, and the usage the stream reports`, async (t) => {
    const bytes = fixture(c.file)
    const chunks = (c.file.endsWith('.json') ? JSON.parse(bytes.toString('utf8')) : ssePayloads(bytes)) as Chunk[]
    const want = expected(chunks)
    t.same(want.kinds, c.kinds, 'the fixture holds the chunks its description names')
    const whole = feed(c.make, bytes)
    t.same(countByKind(whole.events), c.kinds, 'content events by kind')
    t.equal(whole.events.length, want.content)
    if (c.file.includes('thought-parts'))
      t.same(
        whole.events.slice(0, 4).map((e) => e.kind),
        ['reasoning', 'reasoning', 'reasoning', 'reasoning'],
        'thought parts are reasoning',
      )
    const exact = want.exactTokens
    if (c.exact !== undefined) t.same(exact, c.exact)
    if (exact !== undefined) {
      t.same(
        whole.events.map((e) => e.tokens),
        exact,
        'per-chunk counts from the advancing cumulative usage',
      )
      t.ok(
        whole.events.every((e) => e.exact),
        'all exact',
      )
      const streamed = c.usage.output - (want.thoughtsStreamed ? 0 : (c.usage.reasoning ?? 0))
      t.equal(
        exact.reduce((a, b) => a + b, 0),
        streamed,
        'the exact counts add up to the reported output, less thinking not streamed',
      )
    } else {
      t.ok(
        whole.events.every((e) => !e.exact && e.tokens >= 1),
        'estimates where usage does not advance per chunk',
      )
    }
    t.same(whole.summary.usage, c.usage, 'usage: the last usageMetadata')
    t.same(want.usage, c.usage)
    t.equal(whole.summary.model, want.model)
    t.equal(whole.summary.error, undefined)
    t.equal(whole.summary.parseError, undefined)
    const split = splitDifferences(c.make, bytes, whole)
    t.equal(split.differing, 0, `the same events and summary at every split (${split.runs} runs)`, { first: split.first })
  })
}

t.test('the JSON-array stream emits each element as soon as its closing brace arrives', async (t) => {
  const bytes = fixture('gemini/gemini-json-array-stream.json')
  const parser = makeArray()
  const firstEnd = bytes.indexOf('\n}\n,') + 2
  t.equal(parser.push(bytes.subarray(0, firstEnd - 1)).length, 0, 'not before')
  t.equal(parser.push(bytes.subarray(firstEnd - 1, firstEnd)).length, 1, 'with the last byte')
})

t.test('an error object in the stream is a provider error, SSE or array', async (t) => {
  const error = { error: { code: 503, message: 'The model is overloaded.', status: 'UNAVAILABLE' } }
  t.equal(feed(makeSse, Buffer.from(`data: ${JSON.stringify(error)}\r\n\r\n`)).summary.error, 'UNAVAILABLE')
  t.equal(feed(makeArray, Buffer.from(`[${JSON.stringify(error)}]`)).summary.error, 'UNAVAILABLE')
  t.equal(feed(makeArray, Buffer.from(JSON.stringify(error))).summary.error, 'UNAVAILABLE', 'a bare error object')
})

t.test('a bare pretty-printed error object written outside the SSE framing is a provider error, at any split', async (t) => {
  const chunk = `data: ${JSON.stringify({ candidates: [{ content: { parts: [{ text: 'Hello' }] } }] })}\r\n\r\n`
  const error = JSON.stringify({ error: { code: 429, message: 'Resource has been exhausted {x}', status: 'RESOURCE_EXHAUSTED' } }, null, 2)
  for (const body of [Buffer.from(`${chunk + error}\n`), Buffer.from(error), Buffer.from(chunk + chunk + error)]) {
    const whole = feed(makeSse, body)
    t.equal(whole.summary.error, 'RESOURCE_EXHAUSTED')
    t.equal(whole.summary.parseError, undefined)
    const split = splitDifferences(makeSse, body, whole)
    t.equal(split.differing, 0, `the same at every split (${split.runs} runs)`, { first: split.first })
  }
  const notJson = feed(makeSse, Buffer.from(`${chunk}{ not json }\n${chunk}`))
  t.equal(notJson.events.length, 2, 'a stray brace line is ignored')
  t.equal(notJson.summary.error, undefined)
  t.equal(notJson.summary.parseError, undefined)
  const small = () => new GeminiSseParser(parserContext(PATH, 'text/event-stream', 8))
  t.equal(feed(small, Buffer.from('{"error": {"status": "TOO_LONG_TO_KEEP"}}')).summary.error, undefined, 'an oversized raw object is dropped')
  t.equal(feed(makeSse, Buffer.from('{"a":1} {"b":2}\n')).summary.error, undefined, 'bytes after a raw object are ignored')
})

t.test('a content chunk that does not advance the usage ends exact counting for the rest of the stream', async (t) => {
  const chunk = (text: string, candidates: number) =>
    `data: ${JSON.stringify({ candidates: [{ content: { parts: [{ text }] } }], usageMetadata: { promptTokenCount: 3, candidatesTokenCount: candidates } })}\n\n`
  const { events, summary } = feed(makeSse, Buffer.from(chunk(' one two', 2) + chunk(' three', 2) + chunk(' four five six', 6)))
  t.same(
    events.map((e) => [e.tokens, e.exact]),
    [
      [2, true],
      [1, false],
      [3, false],
    ],
  )
  t.same(summary.usage, { input: 3, output: 6 })
})

t.test('bad array elements and oversized elements stop measuring quietly', async (t) => {
  t.match(feed(makeArray, Buffer.from('[{"candidates": oops}]')).summary.parseError, /invalid JSON/)
  t.match(feed(makeArray, Buffer.from('<html>')).summary.parseError, /not a JSON array/)
  const small = () => new GeminiArrayParser(parserContext(PATH, 'application/json', 16))
  const r = feed(small, Buffer.from(`[{"candidates":[{"content":{"parts":[{"text":"${'x'.repeat(40)}"}]}}]}, {"a":1}]`))
  t.match(r.summary.parseError, /over the limit/)
  t.equal(r.events.length, 0)
  t.same(feed(makeArray, Buffer.from('[1, "s", {"candidates": "no"}, {"candidates": [1, {"content": {"parts": [null, {"text": ""}]}}]}]')).events, [], 'odd shapes are no content')
})

t.test('a whole generateContent answer gives its usage and model', async (t) => {
  t.same(
    summarizeGeminiBody({
      candidates: [{ content: { parts: [{ text: 'Hi' }] } }],
      usageMetadata: { promptTokenCount: 4, candidatesTokenCount: 9, thoughtsTokenCount: 3 },
      modelVersion: 'gemini-2.5-pro',
    }),
    {
      model: 'gemini-2.5-pro',
      usage: { input: 4, output: 12, reasoning: 3 },
    },
  )
  t.same(summarizeGeminiBody('x'), {})
})

t.test('Gemini and Vertex paths are detected, with the model from the path, and the parser fits the framing', async (t) => {
  const paths: [string, string][] = [
    ['/v1beta/models/gemini-2.5-flash:streamGenerateContent', 'gemini-2.5-flash'],
    ['/v1/models/gemini-2.0-flash:generateContent', 'gemini-2.0-flash'],
    ['/v1/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent', 'gemini-2.5-pro'],
    ['/v1beta1/projects/p/locations/global/publishers/google/models/gemini-3-flash-preview:generateContent', 'gemini-3-flash-preview'],
  ]
  for (const [path, model] of paths) {
    const spec = providerForPath('auto', path)
    t.equal(spec?.name, 'gemini', path)
    t.equal(spec?.modelFromPath?.(path), model)
  }
  t.equal(geminiModelFromPath('/v1beta/models/bad%ZZ:generateContent'), 'bad%ZZ', 'an undecodable name is kept as is')
  t.equal(geminiModelFromPath('/v1/chat/completions'), undefined)
  t.not(providerForPath('auto', '/v1/projects/p/locations/l/publishers/mistralai/models/m:streamRawPredict')?.name, 'gemini', 'other Vertex publishers are not Gemini')
  const ctx = (path: string, ct: string) => parserContext(path, ct)
  t.ok(selectParser('auto', paths[0][0], 'text/event-stream', ctx(paths[0][0], 'text/event-stream')).parser instanceof GeminiSseParser)
  t.ok(selectParser('auto', paths[0][0], 'application/json; charset=UTF-8', ctx(paths[0][0], 'application/json')).parser instanceof GeminiArrayParser)
  t.ok(selectParser('gemini', paths[1][0], 'application/json', ctx(paths[1][0], 'application/json')).parser instanceof JsonBodyParser)
  const countPath = '/v1beta/models/gemini-2.5-flash:countTokens'
  t.equal(selectParser('auto', countPath, 'application/json', ctx(countPath, 'application/json')).parser, undefined, 'countTokens is no completion')
  t.equal(selectParser('auto', countPath, 'application/json', ctx(countPath, 'application/json')).provider, 'gemini')
  t.equal(selectParser('auto', paths[0][0], 'text/plain', ctx(paths[0][0], 'text/plain')).parser, undefined)
})
