import t from 'tap'
import { summarizeTgiBody, TgiParser } from '../../src/parsers/tgi.ts'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { selectParser } from '../../src/parsers/registry.ts'
import { feed, fixture, parserContext, splitAt, splitOffsets, totals } from '../helpers/feed.ts'
import { defined } from '../helpers/defined.ts'

const ctx = parserContext({ path: '/generate_stream', contentType: 'text/event-stream' })

t.test('TGI native /generate_stream: one exact token per non-special event, usage from details, at every split', async (t) => {
  const bytes = fixture('tgi/generate-stream-native.sse')
  const plain = bytes
    .toString('utf8')
    .split('\n')
    .filter((l) => l.startsWith('data:'))
    .map((l) => JSON.parse(l.slice(5)) as { token: { special: boolean } })
    .filter((v) => !v.token.special).length
  t.equal(plain, 150)
  const whole = feed(new TgiParser(ctx), [bytes])
  t.equal(whole.events.length, 150)
  t.ok(whole.events.every((e) => e.kind === 'text' && e.tokens === 1 && e.exact))
  t.same(whole.summary.usage, { output: 150 })
  t.equal(whole.summary.parseError, undefined)
  const want = totals(whole)
  for (const i of splitOffsets(bytes.length)) {
    const r = feed(new TgiParser(ctx), splitAt(bytes, i))
    t.same([totals(r), r.summary.usage], [want, { output: 150 }], `split at ${i}`)
  }
})

t.test('special tokens are not content but the usage still counts them', async (t) => {
  const ev = (id: number, text: string, special: boolean, details?: object) =>
    `data:${JSON.stringify({ index: id, token: { id, text, logprob: -0.1, special }, generated_text: details ? 'ab' : null, details: details ?? null })}\n\n`
  const body = ev(1, 'a', false) + ev(2, 'b', false) + ev(3, '</s>', true, { finish_reason: 'eos_token', generated_tokens: 3, seed: null })
  const r = feed(new TgiParser(ctx), [Buffer.from(body)])
  t.equal(r.events.length, 2)
  t.same(r.summary.usage, { output: 3 })
})

t.test('an error event is a provider error', async (t) => {
  const body =
    'data:{"index":1,"token":{"id":5,"text":"a","logprob":0,"special":false},"generated_text":null,"details":null}\n\ndata:{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}\n\n'
  const r = feed(new TgiParser(ctx), [Buffer.from(body)])
  t.equal(r.events.length, 1)
  t.equal(r.summary.error, 'generation')
  t.equal(feed(new TgiParser(ctx), [Buffer.from('data:{"error":"overloaded"}\n\n')]).summary.error, 'overloaded')
})

t.test('a whole /generate answer gives the usage', async (t) => {
  t.same(summarizeTgiBody({ generated_text: 'x', details: { finish_reason: 'length', generated_tokens: 20 } }), { usage: { output: 20 } })
  t.same(summarizeTgiBody([{ generated_text: 'x', details: { generated_tokens: 4 } }]), { usage: { output: 4 } })
  t.same(summarizeTgiBody({ error: 'Input validation error', error_type: 'validation' }), { error: 'validation' })
  const sel = selectParser('auto', '/generate', 'application/json', ctx)
  t.equal(sel.provider, 'tgi')
  t.same(feed(defined(sel.parser, 'a parser'), [Buffer.from('{"generated_text":"x","details":{"generated_tokens":2}}')]).summary.usage, { output: 2 })
  t.equal(selectParser('auto', '/generate_stream', 'text/event-stream', ctx).provider, 'tgi')
  t.equal(selectParser('tgi', '/generate_stream', 'text/plain', ctx).parser, undefined)
})

t.test("TGI's /v1/chat/completions (1.4.4: no space after data:, role in every chunk) goes through the OpenAI parser", async (t) => {
  const bytes = fixture('tgi/v1-chat-stream-tgi-1.4.4.sse')
  const contents = bytes
    .toString('utf8')
    .split('\n')
    .filter((l) => l.startsWith('data:'))
    .map((l) => JSON.parse(l.slice(5)) as { choices: { delta: { content?: string } }[] })
    .filter((v) => (v.choices[0]?.delta.content ?? '') !== '').length
  const sel = selectParser('auto', '/v1/chat/completions', 'text/event-stream', ctx)
  t.equal(sel.provider, 'openai')
  t.type(sel.parser, OpenAIChatParser)
  const whole = feed(defined(sel.parser, 'a parser'), [bytes])
  t.equal(contents, 100, 'one content chunk per generated token in this capture')
  t.equal(whole.events.length, contents)
  t.equal(whole.summary.model, 'teknium/OpenHermes-2.5-Mistral-7B')
  t.equal(whole.summary.usage, undefined, 'this capture has no usage: the tokenizer counts it')
  const want = totals(whole)
  for (const i of splitOffsets(bytes.length, 300)) t.same(totals(feed(new OpenAIChatParser(ctx), splitAt(bytes, i))), want, `split at ${i}`)
})
