import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'

// A schedule the test knows: first chunk of 2 tokens at 60 ms, then [gap ms, tokens].
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
/** When the last chunk is due, from the simulator's start: TTFT plus the decode time. */
const LAST_DUE_S = plan.ttft_ms / 1000 + DECODE_S

t.test('the official OpenAI SDK streams through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test-secret' })

  const REQUESTS = 3
  for (let r = 0; r < REQUESTS; r++) {
    const stream = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'count' }],
      stream: true,
      stream_options: { include_usage: r !== 2 },
    }, simPlan(plan))
    let text = ''
    let usage: number | undefined
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? ''
      if (chunk.usage) usage = chunk.usage.completion_tokens
    }
    t.equal(text.split(' ').length - 1, N, 'the client received every token')
    if (r !== 2) t.equal(usage, N, 'the client received the usage chunk')
  }
  const lines = await proxy.waitForRequests(REQUESTS)
  const m = await proxy.scrape()
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/sim' }

  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), REQUESTS, 'one TTFT per request')
  const ttftSum = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  t.ok(ttftSum >= 0.06 * REQUESTS && ttftSum < (0.06 + 0.25) * REQUESTS, `TTFT sum ${ttftSum} near 3 × 60 ms`)

  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), REQUESTS * (N - FIRST_TOKENS), 'ITL count = N − k1 per request')
  const itlSum = sumOf(m, 'llm_inter_token_latency_seconds_sum', labels)
  // t_last − t_first per request, bounded by what the clock allows rather than by a guess at
  // timer lateness (a loaded machine can freeze the process for 100 ms and more): the simulator
  // never writes a chunk before it is due, and chunks are due at offsets from its start (after
  // t_req), so t_last − t_first ≥ LAST_DUE − TTFT; the response ends after its last chunk, so
  // t_last − t_first ≤ E2E − TTFT. On a quiet machine both bounds lie within a few ms of 3 × 270 ms.
  const e2eSum = sumOf(m, 'llm_request_duration_seconds_sum', { ...labels, outcome: 'ok' })
  const itlLow = REQUESTS * LAST_DUE_S - ttftSum
  const itlHigh = e2eSum - ttftSum
  t.ok(itlSum >= itlLow - 1e-6 && itlSum <= itlHigh + 1e-6, `ITL sum ${itlSum} ≈ ${REQUESTS * DECODE_S} (t_last − t_first per request): within [${itlLow}, ${itlHigh}]`)

  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), REQUESTS * GAPS.length, 'one gap per chunk after the first')
  const gapSum = sumOf(m, 'llm_inter_chunk_latency_seconds_sum', labels)
  t.ok(Math.abs(gapSum - itlSum) < 1e-9, 'inter-chunk gaps sum to the same decode time as ITL')

  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count', labels), REQUESTS, 'one TPOT per ok request')
  const tpotSum = sumOf(m, 'llm_time_per_output_token_seconds_sum', labels)
  // Every request has the same N − k1, so the TPOTs sum to the ITL sum over N − k1, exactly.
  const tpotWant = itlSum / (N - FIRST_TOKENS)
  t.ok(Math.abs(tpotSum - tpotWant) < 1e-9, `TPOT sum ${tpotSum} = ITL sum / (N − k1) = ${tpotWant} ≈ ${(REQUESTS * DECODE_S) / (N - FIRST_TOKENS)}`)

  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), REQUESTS, 'E2E once per request')
  t.equal(sumOf(m, 'llm_output_tokens_per_second_count', labels), REQUESTS, 'per-user TPS once per ok request')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 2 * N, 'provider usage counted where the client asked for it')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), N, 'the tokenizer counts the stream without usage')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), REQUESTS)
  t.same(select(m, 'llm_requests_in_flight').map((s) => s.value), [0], 'nothing left in flight')

  for (const line of lines) {
    t.equal(line.chunks, GAPS.length + 1)
    t.equal(line.streamed_tokens, N)
    t.notMatch(JSON.stringify(line), /sk-test-secret/, 'the API key is never logged')
  }
})

t.test('a non-streamed completion passes through and counts its usage, with no TTFT', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  const answer = await client.chat.completions.create({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'hi' }],
  }, simPlan({ ttft_ms: 10, chunks: [[5, 2], [5, 2]] }))
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
  const stream = await client.completions.create({
    model: 'gpt-3.5-turbo-instruct',
    prompt: 'say',
    stream: true,
  }, simPlan({ ttft_ms: 20, chunks: [[20, 1], [20, 1], [20, 1]] }))
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
