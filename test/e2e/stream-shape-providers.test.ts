import t from 'tap'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { pointsOf, startOtlpReceiver } from '../helpers/otlp-receiver.ts'

// The stall and burst metrics come from the chunk marks, whatever the API: the same schedule
// through the simulator's Anthropic, Gemini and Responses formats gives the same figures.
// One stall of 700 ms against stall_seconds 0.35, every other gap 10 ms or 0: chunks are due at
// offsets from the start, so a chunk a loaded machine makes late shortens the gap after it and
// lengthens the one before; up to ~340 ms of lateness neither adds a stall nor removes one.
const PLAN = { ttft_ms: 20, first_tokens: 1, chunks: [[10, 1], [700, 2], [0, 8], [10, 1]] }
const TOKENS = [1, 1, 2, 8, 1]

const APIS = [
  { provider: 'anthropic', model: 'claude-sonnet-4-5', path: '/v1/messages', body: { model: 'claude-sonnet-4-5', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] }, otel: ['anthropic', 'chat'] },
  { provider: 'gemini', model: 'gemini-2.0-flash', path: '/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse', body: { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }, otel: ['gcp.gemini', 'generate_content'] },
  { provider: 'openai', model: 'gpt-4.1', path: '/v1/responses', body: { model: 'gpt-4.1', stream: true, input: 'hi' }, otel: ['openai', 'chat'] },
] as const

t.test('Anthropic, Gemini and Responses streams give the same stall, gap and burst figures, and OTel names their provider', async (t) => {
  const receiver = await startOtlpReceiver()
  t.teardown(() => receiver.close())
  const proxy = await startProxy({ routes: [simRoute()], metrics: { stall_seconds: 0.35 }, otel: { endpoint: receiver.url } })
  t.teardown(() => proxy.close())
  for (const api of APIS) {
    const res = await fetch(`${proxy.url}/sim${api.path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(PLAN) }, body: JSON.stringify(api.body) })
    t.equal(res.status, 200)
    await res.text()
  }
  await proxy.waitForRequests(APIS.length)
  const m = await proxy.scrape()
  await proxy.app.tokentap.otel?.flush()
  const seen = pointsOf(receiver.received[0], 'gen_ai.client.operation.duration').map((p) => {
    const a = p.attributes
    return [a['gen_ai.provider.name'], a['gen_ai.operation.name'], a['gen_ai.request.model']].join(' ')
  })
  for (const api of APIS) {
    const labels = { provider: api.provider, model: api.model, route: '/sim' }
    t.equal(sumOf(m, 'llm_stream_stalls_total', labels), 1, `${api.provider}: one stall`)
    t.equal(sumOf(m, 'llm_stream_max_gap_seconds_count', labels), 1, `${api.provider}: one longest gap`)
    t.ok(sumOf(m, 'llm_stream_max_gap_seconds_sum', labels) >= 0.3, `${api.provider}: the longest gap is the stall`)
    t.equal(sumOf(m, 'llm_tokens_per_chunk_count', labels), TOKENS.length, `${api.provider}: every chunk`)
    t.equal(sumOf(m, 'llm_tokens_per_chunk_sum', labels), TOKENS.reduce((a, b) => a + b, 0), `${api.provider}: every token`)
    t.same(select(m, 'llm_tokens_per_chunk_bucket', { ...labels, le: '1' }).map((s) => s.value), [3], `${api.provider}: three single-token chunks`)
    t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_count', labels), 1)
    t.ok(seen.includes(`${api.otel[0]} ${api.otel[1]} ${api.model}`), `${api.provider}: OTel ${api.otel.join(' ')}`)
  }
})
