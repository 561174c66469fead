import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { pointsOf, startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import { Received, VirtualClock, near, play, rawCall, startHeldSimulator } from '../helpers/virtual-time.ts'

// The stall and burst metrics come from the chunk marks, whatever the API: the same schedule
// through the simulator's Anthropic, Gemini and Responses formats gives the same figures.
// One stall of 700 ms against stall_seconds 0.35, every other gap 10 ms or 0, on virtual time:
// every figure is exact.
const PLAN = {
  ttft_ms: 20,
  first_tokens: 1,
  chunks: [
    [10, 1],
    [700, 2],
    [0, 8],
    [10, 1],
  ],
}
const TOKENS = [1, 1, 2, 8, 1]

const APIS = [
  {
    provider: 'anthropic',
    model: 'claude-sonnet-5-5',
    path: '/v1/messages',
    body: { model: 'claude-sonnet-5-5', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] },
    otel: ['anthropic', 'chat'],
  },
  {
    provider: 'gemini',
    model: 'gemini-2.0-flash',
    path: '/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse',
    body: { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] },
    otel: ['gcp.gemini', 'generate_content'],
  },
  { provider: 'openai', model: 'gpt-4.1', path: '/v1/responses', body: { model: 'gpt-4.1', stream: true, input: 'hi' }, otel: ['openai', 'chat'] },
] as const

t.test('Anthropic, Gemini and Responses streams give the same stall, gap and burst figures, and OTel names their provider', async (t) => {
  const receiver = await startOtlpReceiver()
  t.teardown(() => receiver.close())
  const clock = new VirtualClock()
  const sim = await startHeldSimulator()
  t.teardown(() => sim.close())
  const proxy = await startProxy({ routes: [{ prefix: '/sim', upstream: sim.url }], metrics: { stall_seconds: 0.35 }, otel: { endpoint: receiver.url } }, { now: clock.now })
  t.teardown(() => proxy.close())
  const received = new Received()
  for (const api of APIS) {
    const call = rawCall(received, `${proxy.url}/sim${api.path}`, { headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(PLAN) }, body: JSON.stringify(api.body) })
    await play(proxy, clock, sim, received)
    t.equal((await call.done).status, 200)
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
    t.ok(near(sumOf(m, 'llm_stream_max_gap_seconds_sum', labels), 0.7), `${api.provider}: the longest gap is the 700 ms stall`)
    t.equal(sumOf(m, 'llm_time_to_first_token_seconds_sum', labels), 0.02, `${api.provider}: TTFT exactly 20 ms`)
    t.ok(near(sumOf(m, 'llm_inter_token_latency_seconds_sum', labels), 0.72), `${api.provider}: t_last − t_first exactly 720 ms`)
    t.same(
      select(m, 'llm_inter_chunk_latency_seconds_bucket', { ...labels, le: '0.01' }).map((s) => s.value),
      [3],
      `${api.provider}: three gaps of 10 ms or less`,
    )
    t.same(
      select(m, 'llm_inter_chunk_latency_seconds_bucket', { ...labels, le: '0.5' }).map((s) => s.value),
      [3],
      `${api.provider}: and the stall above 0.5 s`,
    )
    t.equal(sumOf(m, 'llm_tokens_per_chunk_count', labels), TOKENS.length, `${api.provider}: every chunk`)
    t.equal(
      sumOf(m, 'llm_tokens_per_chunk_sum', labels),
      TOKENS.reduce((a, b) => a + b, 0),
      `${api.provider}: every token`,
    )
    t.same(
      select(m, 'llm_tokens_per_chunk_bucket', { ...labels, le: '1' }).map((s) => s.value),
      [3],
      `${api.provider}: three single-token chunks`,
    )
    t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_count', labels), 1)
    t.ok(seen.includes(`${api.otel[0]} ${api.otel[1]} ${api.model}`), `${api.provider}: OTel ${api.otel.join(' ')}`)
  }
})
