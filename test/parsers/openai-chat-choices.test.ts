import t from 'tap'
import { OpenAIChatParser } from '../../src/parsers/openai-chat.ts'
import { counterFor } from '../../src/tokens/tokenizer.ts'

const ctx = { path: '/v1/chat/completions', contentType: 'text/event-stream', maxEventBytes: 1 << 20, countTokens: counterFor('o200k_base') }
const ev = (o: unknown): string => `data: ${JSON.stringify(o)}\n\n`
const delta = (index: number, d: Record<string, unknown>) => ({ index, delta: d, finish_reason: null })

t.test('with n > 1, each event carrying new output is one content chunk whatever its choice', async (t) => {
  const p = new OpenAIChatParser(ctx)
  const body =
    ev({ model: 'gpt-4o', choices: [delta(0, { role: 'assistant', content: '' }), delta(1, { role: 'assistant', content: '' })] }) +
    ev({ choices: [delta(0, { content: ' the' })] }) +
    ev({ choices: [delta(1, { content: ' of' })] }) +
    ev({ choices: [delta(0, { content: ' and' }), delta(1, { content: ' to a' })] }) +
    ev({
      choices: [
        { index: 0, delta: {}, finish_reason: 'stop' },
        { index: 1, delta: {}, finish_reason: 'stop' },
      ],
    }) +
    ev({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 5 } }) +
    'data: [DONE]\n\n'
  const events = p.push(Buffer.from(body))
  t.same(
    events.map((e) => e.tokens),
    [1, 1, 3],
    'role-only and finish events are not content; an event with two choices is one chunk of their summed tokens',
  )
  t.ok(events.every((e) => e.kind === 'text' && !e.exact))
  const s = p.end()
  t.same(s.usage, { output: 5, input: 5 })
  t.equal(s.model, 'gpt-4o')
})

t.test('tool-call arguments are content; the call header with empty arguments is not', async (t) => {
  const p = new OpenAIChatParser(ctx)
  const body =
    ev({ choices: [delta(0, { role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'f', arguments: '' } }] })] }) +
    ev({ choices: [delta(0, { tool_calls: [{ index: 0, function: { arguments: '{"a"' } }] })] }) +
    ev({ choices: [delta(0, { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] })] })
  const events = p.push(Buffer.from(body))
  t.equal(events.length, 2)
  t.ok(events.every((e) => e.kind === 'tool'))
})

t.test('a reasoning delta and text in one event is a text chunk carrying both counts', async (t) => {
  const p = new OpenAIChatParser(ctx)
  const events = p.push(Buffer.from(ev({ choices: [delta(0, { reasoning_content: ' the of', content: ' and' })] })))
  t.same(events, [{ kind: 'text', tokens: 3, exact: false }])
})

t.test('invalid JSON ends measuring for the response quietly, reporting why', async (t) => {
  const p = new OpenAIChatParser(ctx)
  t.equal(p.push(Buffer.from(`${ev({ choices: [delta(0, { content: ' the' })] })}data: {not json\n\n`)).length, 1)
  t.same(p.push(Buffer.from(ev({ choices: [delta(0, { content: ' of' })] }))), [], 'nothing more is parsed')
  t.match(p.end().parseError, /invalid JSON/)
})

t.test('an error object inside a 200 stream marks the response as failed', async (t) => {
  const p = new OpenAIChatParser(ctx)
  p.push(Buffer.from(ev({ error: { message: 'overloaded', type: 'server_error', code: 'overloaded' } })))
  t.equal(p.end().error, 'overloaded')
})
