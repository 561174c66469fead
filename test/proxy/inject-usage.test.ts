import t from 'tap'
import { prepareBody, UsageChunkFilter } from '../../src/proxy/inject-usage.ts'
import { fixture, splitOffsets } from '../helpers/feed.ts'

t.test('include_usage is added before the closing brace, the client bytes otherwise untouched', async (t) => {
  const raw = Buffer.from('{"model":"gpt-4o","stream":true,"temperature":1.0,"messages":[{"role":"user","content":"}"}]}\n')
  const p = prepareBody(raw)
  t.equal(p.injected, true)
  t.equal(p.model, 'gpt-4o')
  t.equal(p.body.toString(), '{"model":"gpt-4o","stream":true,"temperature":1.0,"messages":[{"role":"user","content":"}"}],"stream_options":{"include_usage":true}}\n')
  t.same(JSON.parse(p.body.toString()).stream_options, { include_usage: true })
})

t.test("a client's own stream_options, a non-streamed request or a body that is not a JSON object is left alone", async (t) => {
  for (const body of [
    '{"stream":true,"stream_options":{"include_usage":false}}',
    '{"stream":true,"stream_options":null}',
    '{"stream":false}',
    '{"model":"m"}',
    '[{"stream":true}]',
    'not json',
    '"x"',
  ]) {
    const raw = Buffer.from(body)
    const p = prepareBody(raw)
    t.equal(p.injected, false, body)
    t.equal(p.body, raw, 'the very same bytes')
  }
})

/** Usage-chunk removal, checked against the plain answer: the stream with that one event cut out. */
function filterAll(pieces: Buffer[]): Buffer {
  const f = new UsageChunkFilter()
  const out = pieces.map((p) => f.push(p))
  out.push(f.end())
  return Buffer.concat(out)
}

for (const [name, sep] of [
  ['openai/chat-text-role-first-usage-chunk.sse', '\n\n'],
  ['openai/chat-text-role-first-usage-then-moderation-chunk.sse', '\n\n'],
] as const) {
  t.test(`${name}: only the usage-only event is taken out, at every split`, async (t) => {
    const bytes = fixture(name)
    const events = bytes.toString('utf8').split(sep)
    const usageAt = events.findIndex((e) => e.includes('"choices":[]') && e.includes('"usage":{'))
    t.ok(usageAt > 0)
    const want = Buffer.from(events.filter((_, i) => i !== usageAt).join(sep))
    t.equal(want.length, bytes.length - Buffer.byteLength(events[usageAt] + sep))
    t.same(filterAll([bytes]), want)
    for (const i of splitOffsets(bytes.length, 500)) t.same(filterAll([bytes.subarray(0, i), bytes.subarray(i)]), want, `split at ${i}`)
    t.same(filterAll([...bytes].map((b) => Buffer.from([b]))), want, 'one byte per read')
  })
}

t.test('CRLF and CR framing are understood, and only the first usage-only event goes', async (t) => {
  const usage = 'data: {"choices":[],"usage":{"completion_tokens":3}}'
  for (const nl of ['\r\n', '\r', '\n']) {
    const a = `data: {"choices":[{"delta":{"content":"a"}}]}${nl}${nl}`
    const u = `${usage}${nl}${nl}`
    const body = Buffer.from(`${a + u + u}data: [DONE]${nl}${nl}`)
    const want = Buffer.from(`${a + u}data: [DONE]${nl}${nl}`)
    for (const i of splitOffsets(body.length)) {
      for (const j of [i, Math.min(body.length, i + 1), Math.min(body.length, i + 7)]) {
        t.same(filterAll([body.subarray(0, i), body.subarray(i, j), body.subarray(j)]), want, `${JSON.stringify(nl)} split at ${i}, ${j}`)
      }
    }
  }
})

t.test('usage with choices, a null usage, and a malformed event all pass through', async (t) => {
  const body = Buffer.from('data: {"choices":[{"delta":{}}],"usage":{"completion_tokens":1}}\n\ndata: {"choices":[],"usage":null}\n\ndata: {"usage": oops\n\n: comment "usage"\n\n')
  t.same(filterAll([body]), body)
})

t.test('a read made only of whole events that stay is passed on without a copy', async (t) => {
  const f = new UsageChunkFilter()
  const chunk = Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\n')
  t.equal(f.push(chunk), chunk)
  const partial = Buffer.from('data: {"choi')
  t.equal(f.push(partial).length, 0, 'an unfinished event waits for its end')
  t.same(f.end(), partial, 'and goes out as it came when the stream ends')
})

t.test('a held event that completes as long as the read that completes it is written whole', async (t) => {
  // Regression: the read's own length was taken for "nothing changed".
  const f = new UsageChunkFilter()
  const head = Buffer.from('data: {"a"')
  t.equal(f.push(head).length, 0)
  const tail = Buffer.from(':1}\n\ndata: {"b"')
  t.equal(tail.length, Buffer.concat([head, Buffer.from(':1}\n\n')]).length, 'the event has the same length as the read')
  t.equal(f.push(tail).toString(), 'data: {"a":1}\n\n')
  t.equal(f.end().toString(), 'data: {"b"')
})
