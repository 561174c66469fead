import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { Received, VirtualClock, near, play, startHeldSimulator, watchedFetch } from '../helpers/virtual-time.ts'

// A schedule the test knows: first chunk of 2 tokens at 60 ms, then [gap ms, tokens], played on
// virtual time (the proxy's clock is the test's), so every timing figure is exact.
const FIRST_TOKENS = 2
const GAPS: [number, number][] = [
  [30, 1],
  [30, 1],
  [60, 3],
  [30, 1],
  [90, 2],
  [30, 1],
]
const N = FIRST_TOKENS + GAPS.reduce((n, [, k]) => n + k, 0)
const DECODE_S = GAPS.reduce((s, [g]) => s + g, 0) / 1000
const plan = { ttft_ms: 60, first_tokens: FIRST_TOKENS, chunks: GAPS }

/** Cumulative bucket counts of a histogram's series at the given bounds. */
function bucketsAt(m: readonly Sample[], name: string, labels: Record<string, string>, les: readonly string[]): Record<string, number> {
  return Object.fromEntries(les.map((le) => [le, sumOf(m, `${name}_bucket`, { ...labels, le })]))
}

t.test('the official OpenAI SDK streams through the proxy and every metric matches the schedule exactly', async (t) => {
  const clock = new VirtualClock()
  const sim = await startHeldSimulator()
  t.teardown(() => sim.close())
  const proxy = await startProxy({ routes: [{ prefix: '/sim', upstream: sim.url }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  const received = new Received()
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test-secret', fetch: watchedFetch(received) })

  const REQUESTS = 3
  for (let r = 0; r < REQUESTS; r++) {
    const reading = (async () => {
      const stream = await client.chat.completions.create(
        {
          model: 'gpt-4o-mini',
          messages: [{ role: 'user', content: 'count' }],
          stream: true,
          stream_options: { include_usage: r !== 2 },
        },
        simPlan(plan),
      )
      let text = ''
      let usage: number | undefined
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? ''
        if (chunk.usage) usage = chunk.usage.completion_tokens
      }
      return { text, usage }
    })()
    await play(proxy, clock, sim, received)
    const { text, usage } = await reading
    t.equal(text.split(' ').length - 1, N, 'the client received every token')
    if (r !== 2) t.equal(usage, N, 'the client received the usage chunk')
  }
  const lines = await proxy.waitForRequests(REQUESTS)
  const m = await proxy.scrape()
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/sim' }

  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), REQUESTS, 'one TTFT per request')
  t.ok(near(sumOf(m, 'llm_time_to_first_token_seconds_sum', labels), REQUESTS * 0.06), 'TTFT sum exactly 3 × 60 ms')
  t.same(bucketsAt(m, 'llm_time_to_first_token_seconds', labels, ['0.05', '0.075']), { '0.05': 0, '0.075': REQUESTS }, 'every TTFT in (0.05, 0.075]')

  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), REQUESTS * (N - FIRST_TOKENS), 'ITL count = N − k1 per request')
  const itlSum = sumOf(m, 'llm_inter_token_latency_seconds_sum', labels)
  t.ok(near(itlSum, REQUESTS * DECODE_S), `ITL sum ${itlSum} exactly 3 × 270 ms (t_last − t_first per request)`)
  // Token-weighted: each gap g over k tokens is k observations of g / k: per request four of
  // 30 ms, three of 20 ms (60 ms over 3 tokens) and two of 45 ms (90 ms over 2).
  t.same(
    bucketsAt(m, 'llm_inter_token_latency_seconds', labels, ['0.0175', '0.025', '0.035', '0.04', '0.05', '+Inf']),
    { 0.0175: 0, 0.025: 3 * REQUESTS, 0.035: 7 * REQUESTS, 0.04: 7 * REQUESTS, 0.05: 9 * REQUESTS, '+Inf': 9 * REQUESTS },
    'ITL buckets exactly',
  )

  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), REQUESTS * GAPS.length, 'one gap per chunk after the first')
  t.ok(near(sumOf(m, 'llm_inter_chunk_latency_seconds_sum', labels), itlSum), 'inter-chunk gaps sum to the same decode time as ITL')
  t.same(
    bucketsAt(m, 'llm_inter_chunk_latency_seconds', labels, ['0.025', '0.035', '0.07', '0.1']),
    { 0.025: 0, 0.035: 4 * REQUESTS, 0.07: 5 * REQUESTS, 0.1: 6 * REQUESTS },
    'chunk gaps: four of 30 ms, one of 60 ms, one of 90 ms per request',
  )

  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count', labels), REQUESTS, 'one TPOT per ok request')
  t.ok(near(sumOf(m, 'llm_time_per_output_token_seconds_sum', labels), (REQUESTS * DECODE_S) / (N - FIRST_TOKENS)), 'TPOT sum = ITL sum / (N − k1)')

  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), REQUESTS, 'E2E once per request')
  t.ok(near(sumOf(m, 'llm_request_duration_seconds_sum', { ...labels, outcome: 'ok' }), REQUESTS * 0.33), 'E2E exactly 3 × 330 ms (the end comes with the last chunk)')
  t.equal(sumOf(m, 'llm_output_tokens_per_second_count', labels), REQUESTS, 'per-user TPS once per ok request')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 2 * N, 'provider usage counted where the client asked for it')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), N, 'the tokenizer counts the stream without usage')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), REQUESTS)
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
    'nothing left in flight',
  )

  for (const line of lines) {
    t.equal(line.chunks, GAPS.length + 1)
    t.equal(line.streamed_tokens, N)
    t.equal(line.ttft_ms, 60)
    t.equal(line.e2e_ms, 330)
    t.notMatch(JSON.stringify(line), /sk-test-secret/, 'the API key is never logged')
  }
})

t.test('a non-streamed completion passes through and counts its usage, with no TTFT', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  const answer = await client.chat.completions.create(
    {
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'hi' }],
    },
    simPlan({
      ttft_ms: 10,
      chunks: [
        [5, 2],
        [5, 2],
      ],
    }),
  )
  t.equal(answer.usage?.completion_tokens, 5)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_output_tokens_total', { model: 'gpt-4o', source: 'usage' }), 5)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count'), 0, 'a whole answer has no first-token time')
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { model: 'gpt-4o', outcome: 'ok' }), 1)
})

t.test('legacy completions stream through the SDK and count every token', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  const stream = await client.completions.create(
    {
      model: 'gpt-3.5-turbo-instruct',
      prompt: 'say',
      stream: true,
    },
    simPlan({
      ttft_ms: 20,
      chunks: [
        [20, 1],
        [20, 1],
        [20, 1],
      ],
    }),
  )
  let text = ''
  for await (const c of stream) text += c.choices[0]?.text ?? ''
  t.equal(text.split(' ').length - 1, 4)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { model: 'gpt-3.5-turbo-instruct' }
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), 3)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), 4)
})
