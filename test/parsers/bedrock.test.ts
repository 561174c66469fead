import t from 'tap'
import { BedrockParser, bedrockModelFromPath, summarizeBedrockBody } from '../../src/parsers/bedrock.ts'
import { selectParser, PROVIDERS } from '../../src/parsers/registry.ts'
import { feed, fixture, parserContext, splitAt, splitOffsets, totals } from '../helpers/feed.ts'
import { chunkFrame, eventFrame, frame, walkFrames } from '../helpers/eventstream.ts'
import { defined } from '../helpers/defined.ts'

const ctx = parserContext({ path: '/model/x/converse-stream', contentType: 'application/vnd.amazon.eventstream' })

/** Content frames counted the plain way: walk the frames, look at each delta. */
function plainKinds(bytes: Buffer): string {
  let kinds = ''
  for (const f of walkFrames(bytes)) {
    if (f.headers[':event-type'] !== 'contentBlockDelta') continue
    const d = (JSON.parse(f.payload.toString()) as { delta: { text?: string; reasoningContent?: { text?: string } } }).delta
    if (d.text) kinds += 't'
    else if (d.reasoningContent?.text) kinds += 'r'
  }
  return kinds
}

for (const [name, usage, model] of [
  ['bedrock/converse-stream-nova-text.eventstream', { output: 82, input: 13 }, 'us.amazon.nova-micro-v1:0'],
  ['bedrock/converse-stream-claude-reasoning.eventstream', { output: 73 }, 'us.anthropic.claude-sonnet-4-20250514-v1:0'],
] as const) {
  t.test(`${name}: content deltas, metadata usage, and the same at every split`, async (t) => {
    const bytes = fixture(name)
    const kinds = plainKinds(bytes)
    if (name.includes('nova')) t.equal(kinds, 't'.repeat(29), '29 text deltas, as SOURCES.md says')
    else t.match(kinds, /^r+t+$/, 'reasoning first, then text')
    const whole = feed(new BedrockParser(ctx), [bytes])
    t.equal(whole.events.map((e) => e.kind[0]).join(''), kinds)
    t.match(whole.summary.usage, usage)
    t.equal(whole.summary.error, undefined)
    t.equal(whole.summary.parseError, undefined)
    const want = totals(whole)
    for (const i of splitOffsets(bytes.length, 500)) {
      const r = feed(new BedrockParser(ctx), splitAt(bytes, i))
      t.same([totals(r), r.summary], [want, whole.summary], `split at ${i}`)
    }
    const path = name.includes('nova') ? '/model/us.amazon.nova-micro-v1%3A0/converse-stream' : '/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream'
    t.equal(bedrockModelFromPath(path), model, 'the model comes from the URL-encoded path')
  })
}

t.test('tool input deltas are tool content', async (t) => {
  const bytes = Buffer.concat([
    eventFrame('messageStart', { role: 'assistant' }),
    eventFrame('contentBlockStart', { contentBlockIndex: 0, start: { toolUse: { toolUseId: 't1', name: 'get' } } }),
    eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input: '{"city":' } } }),
    eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input: '"Paris"}' } } }),
    eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { signature: 'abc' } } }),
    eventFrame('messageStop', { stopReason: 'tool_use' }),
    eventFrame('metadata', { usage: { inputTokens: 5, outputTokens: 9, totalTokens: 14 }, metrics: { latencyMs: 100 } }),
  ])
  const r = feed(new BedrockParser(ctx), [bytes])
  t.same(
    r.events.map((e) => e.kind),
    ['tool', 'tool'],
    'a signature is not content',
  )
  t.same(r.summary.usage, { output: 9, input: 5 })
})

t.test('an exception frame is a provider error', async (t) => {
  const bytes = Buffer.concat([
    eventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Hi' } }),
    frame({ ':exception-type': 'throttlingException', ':content-type': 'application/json', ':message-type': 'exception' }, '{"message":"Too many requests"}'),
  ])
  const r = feed(new BedrockParser(ctx), [bytes])
  t.equal(r.events.length, 1)
  t.equal(r.summary.error, 'throttlingException')
  t.equal(feed(new BedrockParser(ctx), [frame({ ':message-type': 'error', ':error-code': 'InternalFailure' }, '')]).summary.error, 'InternalFailure')
  t.equal(feed(new BedrockParser(ctx), [frame({ ':message-type': 'exception' }, '')]).summary.error, 'exception')
})

/** An InvokeModelWithResponseStream answer from Claude, as Bedrock wraps it (no real capture exists; the shape is Anthropic's, base64 in `chunk.bytes`). */
function claudeInvokeStream(): Buffer {
  return Buffer.concat([
    chunkFrame({ type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-3-5-haiku-20241022', content: [], usage: { input_tokens: 21, output_tokens: 1 } } }),
    chunkFrame({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } }),
    chunkFrame({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Let me see.' } }),
    chunkFrame({ type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } }),
    chunkFrame({ type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } }),
    chunkFrame({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Hello' } }),
    chunkFrame({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: ' world' } }),
    chunkFrame({ type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 't', name: 'f', input: {} } }),
    chunkFrame({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '' } }),
    chunkFrame({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"a":1}' } }),
    chunkFrame({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 12 } }),
    chunkFrame({ type: 'message_stop', 'amazon-bedrock-invocationMetrics': { inputTokenCount: 21, outputTokenCount: 12, invocationLatency: 500, firstByteLatency: 200 } }),
  ])
}

t.test('InvokeModelWithResponseStream: Anthropic chunks inside chunk.bytes, usage from the invocation metrics, at every split', async (t) => {
  const bytes = claudeInvokeStream()
  const whole = feed(new BedrockParser(ctx), [bytes])
  t.same(
    whole.events.map((e) => e.kind),
    ['reasoning', 'text', 'text', 'tool'],
  )
  t.same(whole.summary, { model: 'claude-3-5-haiku-20241022', usage: { input: 21, output: 12 }, reported: { prompt: 0.2, total: 0.5 } })
  for (const i of splitOffsets(bytes.length, 300)) {
    const r = feed(new BedrockParser(ctx), splitAt(bytes, i))
    t.same([totals(r), r.summary], [totals(whole), whole.summary], `split at ${i}`)
  }
})

t.test('InvokeModel chunks of other model families and errors inside chunks', async (t) => {
  const r = feed(new BedrockParser(ctx), [
    Buffer.concat([
      chunkFrame({ generation: 'Hi', prompt_token_count: 5, generation_token_count: 1, stop_reason: null }),
      chunkFrame({ outputText: ' there', index: 0 }),
      chunkFrame({ contentBlockDelta: { delta: { text: '!' }, contentBlockIndex: 0 } }),
      chunkFrame({ metadata: { usage: { inputTokens: 5, outputTokens: 3 } } }),
      chunkFrame({ type: 'message_delta', usage: { output_tokens: 4 } }),
      chunkFrame({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }),
    ]),
  ])
  t.equal(r.events.length, 3)
  t.same(r.summary.usage, { output: 4, input: 5 })
  t.equal(r.summary.error, 'overloaded_error')
  const bad = feed(new BedrockParser(ctx), [eventFrame('chunk', { bytes: Buffer.from('not json').toString('base64') })])
  t.equal(bad.summary.parseError, 'invalid JSON in a chunk')
  const notJson = feed(new BedrockParser(ctx), [frame({ ':event-type': 'chunk', ':message-type': 'event' }, 'nope')])
  t.match(notJson.summary.parseError, /invalid JSON in frame 'chunk'/)
  t.same(feed(new BedrockParser(ctx), [eventFrame('chunk', { nothing: 1 }), eventFrame('chunk', { bytes: Buffer.from('[1]').toString('base64') }), eventFrame('x', [1])]).events, [])
})

t.test('a corrupt frame stops measuring but never throws', async (t) => {
  const bytes = fixture('bedrock/converse-stream-nova-text.eventstream')
  const broken = Buffer.from(bytes)
  broken[300] ^= 0xff
  const r = feed(new BedrockParser(ctx), [broken])
  t.match(r.summary.parseError, /CRC mismatch/)
  t.ok(r.events.length < 29)
  const parser = new BedrockParser(ctx)
  parser.push(broken)
  t.same(parser.push(bytes), [], 'nothing after giving up')
})

t.test('whole Converse and InvokeModel answers give the usage', async (t) => {
  t.same(summarizeBedrockBody({ output: { message: { role: 'assistant', content: [{ text: 'hi' }] } }, stopReason: 'end_turn', usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 } }), {
    usage: { output: 4, input: 3 },
  })
  t.same(summarizeBedrockBody({ model: 'claude-3', usage: { input_tokens: 10, output_tokens: 2 } }), { model: 'claude-3', usage: { output: 2, input: 10 } })
  t.same(summarizeBedrockBody({ generation: 'x', prompt_token_count: 6, generation_token_count: 8 }), { usage: { output: 8, input: 6 } })
  t.same(summarizeBedrockBody(null), {})
  const sel = selectParser('auto', '/model/amazon.nova-lite-v1%3A0/converse', 'application/json', ctx)
  t.equal(sel.provider, 'bedrock')
  t.same(feed(defined(sel.parser, 'a parser'), [Buffer.from('{"usage":{"inputTokens":1,"outputTokens":2}}')]).summary.usage, { output: 2, input: 1 })
})

t.test('Bedrock paths are recognised, the model decoded, and the eventstream type alone is enough', async (t) => {
  const bedrock = defined(
    PROVIDERS.find((p) => p.name === 'bedrock'),
    'the bedrock entry',
  )
  t.ok(bedrock.ownsPath('/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream'))
  t.ok(bedrock.ownsPath('/model/m/invoke'))
  t.notOk(bedrock.ownsPath('/model/m/other'))
  t.notOk(bedrock.ownsPath('/v1/chat/completions'))
  t.equal(bedrock.modelFromPath?.('/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/converse'), 'arn:aws:bedrock:us-east-1:1:inference-profile/us.x')
  t.equal(bedrockModelFromPath('/model/bad%E0%A4%A/converse'), 'bad%E0%A4%A', 'an undecodable id is kept as it is')
  t.equal(selectParser('auto', '/somewhere', 'application/vnd.amazon.eventstream', ctx).provider, 'bedrock')
  t.equal(selectParser('bedrock', '/model/m/converse-stream', 'text/plain', ctx).parser, undefined)
})
