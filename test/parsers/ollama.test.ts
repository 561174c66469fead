import t from 'tap'
import { OllamaParser, summarizeOllamaBody } from '../../src/parsers/ollama.ts'
import { selectParser } from '../../src/parsers/registry.ts'
import { feed, fixture, parserContext, splitAt, splitOffsets, totals } from '../helpers/feed.ts'
import { defined } from '../helpers/defined.ts'

const ctx = parserContext({ path: '/api/chat', contentType: 'application/x-ndjson' })

/** Content lines counted the plain way: parse each line, look at the fields. */
function contentLines(body: Buffer): number {
  return body
    .toString('utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as { message?: { content?: string }; response?: string })
    .filter((v) => (v.message?.content ?? v.response ?? '') !== '').length
}

for (const [name, lines] of [
  ['ollama/api-chat-stream.ndjson', 21],
  ['ollama/api-generate-stream.ndjson', 21],
] as const) {
  t.test(`${name}: one content chunk per non-empty line and usage from the done line, at every split`, async (t) => {
    const bytes = fixture(name)
    t.equal(contentLines(bytes), lines, 'the plain count agrees with SOURCES.md')
    const whole = feed(new OllamaParser(ctx), [bytes])
    t.equal(whole.events.length, lines)
    t.ok(whole.events.every((e) => e.kind === 'text' && !e.exact && e.tokens >= 1))
    t.same(whole.summary.usage, { output: 22, input: 16 })
    t.equal(whole.summary.model, 'gemma3:1b')
    t.equal(whole.summary.error, undefined)
    t.equal(whole.summary.parseError, undefined)
    const evalNs = name.includes('chat') ? 105611917 : 108922125
    t.same(whole.summary.extra, { eval_duration_ms: Math.round(evalNs / 1e3) / 1e3, eval_rate_tps: Math.round((22 / evalNs) * 1e11) / 100 })
    const want = totals(whole)
    for (const i of splitOffsets(bytes.length)) {
      const r = feed(new OllamaParser(ctx), splitAt(bytes, i))
      t.same([totals(r), r.summary.usage], [want, whole.summary.usage], `split at ${i}`)
    }
    const lineByLine = feed(
      new OllamaParser(ctx),
      bytes
        .toString('utf8')
        .split(/(?<=\n)/)
        .map((l) => Buffer.from(l)),
    )
    t.same(
      lineByLine.reads,
      Array.from({ length: lines }, (_, i) => i),
      'each line completes its own content chunk',
    )
  })
}

t.test('thinking, tool calls and generate thinking are content of their kind', async (t) => {
  const body = [
    { model: 'qwen3', message: { role: 'assistant', content: '', thinking: 'Let me think' }, done: false },
    { model: 'qwen3', message: { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] }, done: false },
    { model: 'qwen3', message: { role: 'assistant', content: 'Sunny', thinking: 'ok' }, done: false },
    { model: 'qwen3', response: '', thinking: 'hmm', done: false },
    { model: 'qwen3', message: { role: 'assistant', content: '' }, done: true, eval_count: 9, prompt_eval_count: 4, eval_duration: 0 },
  ]
  const r = feed(new OllamaParser(ctx), [Buffer.from(body.map((b) => `${JSON.stringify(b)}\r\n`).join(''))])
  t.same(
    r.events.map((e) => e.kind),
    ['reasoning', 'tool', 'text', 'reasoning'],
  )
  t.same(r.summary.usage, { output: 9, input: 4 })
  t.equal(r.summary.extra, undefined, 'no rate without a duration')
})

t.test('an error line is a provider error', async (t) => {
  const r = feed(new OllamaParser(ctx), [Buffer.from('{"model":"m","message":{"content":"a"},"done":false}\n{"error":"model runner has unexpectedly stopped"}\n')])
  t.equal(r.events.length, 1)
  t.equal(r.summary.error, 'model runner has unexpectedly stopped')
  t.equal(feed(new OllamaParser(ctx), [Buffer.from('{"error":{"message":"boom"}}\n')]).summary.error, 'boom')
  t.equal(feed(new OllamaParser(ctx), [Buffer.from('{"error":{}}\n')]).summary.error, 'error')
})

t.test('bad input stops measuring quietly', async (t) => {
  const r = feed(new OllamaParser(ctx), [Buffer.from('{"message":{"content":"a"}}\nnot json\n{"message":{"content":"b"}}\n')])
  t.equal(r.events.length, 1)
  t.equal(r.summary.parseError, 'invalid JSON line')
  const small = new OllamaParser(parserContext({ maxEventBytes: 1024 }))
  const big = feed(small, [Buffer.from(`{"message":{"content":"${'x'.repeat(2000)}"}}\n`)])
  t.match(big.summary.parseError, /over the limit/)
  t.same(feed(new OllamaParser(ctx), [Buffer.from('[1,2]\n"x"\n')]).events, [], 'non-object lines carry nothing')
})

t.test('a last line without a newline still gives the usage', async (t) => {
  const r = feed(new OllamaParser(ctx), [Buffer.from('{"message":{"content":"a"},"done":false}\n{"done":true,"eval_count":3,"prompt_eval_count":2,"eval_duration":1000000}')])
  t.same(r.summary.usage, { output: 3, input: 2 })
  t.same(r.summary.extra, { eval_duration_ms: 1, eval_rate_tps: 3000 })
})

t.test('a whole stream:false answer gives the usage and the model', async (t) => {
  const answer = { model: 'llama3.2', message: { role: 'assistant', content: 'Hi' }, done: true, eval_count: 7, prompt_eval_count: 12, eval_duration: 70_000_000 }
  t.same(summarizeOllamaBody(answer), { model: 'llama3.2', usage: { output: 7, input: 12 }, extra: { eval_duration_ms: 70, eval_rate_tps: 100 }, reported: { generation: 0.07 } })
  t.same(summarizeOllamaBody('nope'), {})
  const sel = selectParser('auto', '/api/generate', 'application/json; charset=utf-8', ctx)
  t.equal(sel.provider, 'ollama')
  t.same(feed(defined(sel.parser, 'a parser'), [Buffer.from(JSON.stringify(answer))]).summary.usage, { output: 7, input: 12 })
})

t.test('Ollama is chosen by path, by configuration, and by an NDJSON body on an unknown path', async (t) => {
  t.equal(selectParser('auto', '/api/chat', 'application/x-ndjson', ctx).provider, 'ollama')
  t.type(selectParser('ollama', '/api/chat', 'application/x-ndjson', ctx).parser, OllamaParser)
  t.equal(selectParser('ollama', '/api/chat', 'text/html', ctx).parser, undefined)
  const guessed = selectParser('auto', '/custom/stream', 'application/x-ndjson', ctx)
  t.equal(guessed.provider, 'ollama')
  t.type(guessed.parser, OllamaParser)
})
