import t from 'tap'
import OpenAI from 'openai'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { simPlan, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { Received, VirtualClock, near, play, playSteps, rawCall, startHeldSimulator, startHeldUpstream, watchedFetch } from '../helpers/virtual-time.ts'

/** Cumulative bucket counts of a histogram's series, by `le`. */
function buckets(m: readonly Sample[], name: string, labels: Record<string, string>): Record<string, number> {
  const out: Record<string, number> = {}
  for (const s of select(m, `${name}_bucket`, labels)) out[s.labels.le] = (out[s.labels.le] ?? 0) + s.value
  return out
}

// First chunk (1 token) at 50 ms, then [gap ms, tokens]: two stalls (700 ms each, over
// stall_seconds 0.35) and a burst (4 then 8 tokens, the 8 with no gap at all). On virtual time
// every chunk arrives exactly when due, so each figure is exact.
const CHUNKS: [number, number][] = [
  [10, 1],
  [700, 1],
  [10, 4],
  [0, 8],
  [700, 2],
]
const TOKENS = [1, ...CHUNKS.map(([, k]) => k)]
const N = TOKENS.reduce((a, b) => a + b, 0)

t.test('a schedule with two stalls and a burst gives exact stall, max-gap, tokens-per-chunk and phase figures', async (t) => {
  const clock = new VirtualClock()
  const sim = await startHeldSimulator()
  t.teardown(() => sim.close())
  const proxy = await startProxy({ routes: [{ prefix: '/sim', upstream: sim.url }], metrics: { stall_seconds: 0.35 } }, { now: clock.now })
  t.teardown(() => proxy.close())
  const received = new Received()
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test', fetch: watchedFetch(received) })
  for (const includeUsage of [true, false]) {
    const reading = (async () => {
      const stream = await client.chat.completions.create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'go' }], stream: true, stream_options: { include_usage: includeUsage } },
        simPlan({ ttft_ms: 50, first_tokens: 1, chunks: CHUNKS }),
      )
      let text = ''
      for await (const c of stream) text += c.choices[0]?.delta?.content ?? ''
      return text
    })()
    await play(proxy, clock, sim, received)
    t.equal((await reading).split(' ').length - 1, N)
  }
  const lines = await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/sim' }

  t.equal(sumOf(m, 'llm_stream_stalls_total', labels), 4, 'two stalls per request')
  t.equal(sumOf(m, 'llm_stream_max_gap_seconds_count', labels), 2, 'one longest gap per request')
  const maxGapSum = sumOf(m, 'llm_stream_max_gap_seconds_sum', labels)
  t.ok(near(maxGapSum, 1.4), `max gap sum ${maxGapSum} = 2 × 700 ms`)
  const gapBuckets = buckets(m, 'llm_stream_max_gap_seconds', labels)
  t.same(gapBuckets, Object.fromEntries([...DEFAULT_BUCKETS.max_gap.map((b) => [String(b), b >= 0.7 ? 2 : 0]), ['+Inf', 2]]), 'both longest gaps in (0.6, 0.75]')
  t.same(
    lines.map((l) => l.max_gap_ms),
    [700, 700],
    'the log line shows the same stall',
  )

  t.same(buckets(m, 'llm_tokens_per_chunk', labels), { 1: 6, 2: 8, 3: 8, 4: 10, 6: 10, 8: 12, 12: 12, 16: 12, 32: 12, 64: 12, '+Inf': 12 }, 'every chunk once, by its tokens')
  t.equal(sumOf(m, 'llm_tokens_per_chunk_sum', labels), 2 * N, 'the chunks carry every token')

  t.equal(sumOf(m, 'llm_time_to_response_headers_seconds_count', labels), 2, 'headers timed once per request')
  t.equal(sumOf(m, 'llm_time_to_response_headers_seconds_sum', labels), 0, 'the headers came at once')
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_sum', labels), 0.1, 'TTFT exactly 2 × 50 ms')
  t.same([buckets(m, 'llm_time_to_first_token_seconds', labels)['0.025'], buckets(m, 'llm_time_to_first_token_seconds', labels)['0.05']], [0, 2], 'both in (0.025, 0.05]')
  t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_count', labels), 2)
  t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_sum', labels), 0.1, 'without reasoning the first output token is the first token')
  const itl = sumOf(m, 'llm_inter_token_latency_seconds_sum', labels)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), 2 * (N - 1), 'ITL count = N − k1 per request')
  t.ok(near(itl, 2 * 1.42), `ITL sum ${itl} = 2 × (t_last − t_first) = 2 × 1420 ms`)
  t.ok(near(sumOf(m, 'llm_inter_chunk_latency_seconds_sum', labels), 2 * 1.42), 'the chunk gaps sum to the same')
  t.ok(near(sumOf(m, 'llm_request_duration_seconds_sum', labels), 2 * 1.47), 'E2E exactly 2 × 1470 ms (the end comes with the last chunk)')

  t.equal(sumOf(m, 'llm_token_estimate_ratio_count', labels), 1, 'only the request with usage has a ratio')
  t.same(buckets(m, 'llm_token_estimate_ratio', labels)['0.99'], 0)
  t.same(buckets(m, 'llm_token_estimate_ratio', labels)['1'], 1, 'the simulator’s words are exact tokens: ratio 1')
  t.same(select(m, 'llm_slo_requests_total'), [], 'no SLO series for a route without an slo')
})

const sse = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`
const chunk = (delta: Record<string, unknown>): string =>
  sse({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'deepseek-reasoner', choices: [{ index: 0, delta, finish_reason: null }] })

t.test('reasoning before the answer separates the first output token from the first token, and usage below the estimate shows in the ratio', async (t) => {
  const clock = new VirtualClock()
  const upstream = await startHeldUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'req_upstream_1' })
    res.flushHeaders()
    res.write(chunk({ role: 'assistant', content: null, reasoning_content: '' }))
    res.write(chunk({ content: null, reasoning_content: ' the' }))
    res.write(chunk({ content: null, reasoning_content: ' of' }))
    res.write(chunk({ content: ' and' }))
    res.write(chunk({ content: ' to' }))
    // The provider counts 8 output tokens for the 4 the tokenizer saw (e.g. hidden reasoning it does not break out).
    res.write(sse({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'deepseek-reasoner', choices: [], usage: { prompt_tokens: 5, completion_tokens: 8, total_tokens: 13 } }))
    res.write('data: [DONE]\n\n')
    res.end()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/ds', upstream: upstream.url, provider: 'openai' }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  const received = new Received()
  const call = rawCall(received, `${proxy.url}/ds/v1/chat/completions`, {
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'deepseek-reasoner', stream: true, messages: [] }),
  })
  // Headers, the role chunk, two reasoning chunks from 300 ms, the answer from 510 ms, usage, [DONE], end.
  await play(proxy, clock, upstream, received, [0, 0, 300, 310, 510, 520, 520, 520, 520])
  t.equal((await call.done).status, 200)
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.request_id, 'req_upstream_1', 'with no client id the upstream’s x-request-id names the request')
  const m = await proxy.scrape()
  const labels = { model: 'deepseek-reasoner', route: '/ds' }
  t.equal(sumOf(m, 'llm_time_to_response_headers_seconds_sum', labels), 0, 'headers at once')
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_sum', labels), 0.3, 'TTFT is the first reasoning chunk, at 300 ms')
  t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_sum', labels), 0.51, 'the first output token comes at 510 ms: 210 ms of visible thinking')
  t.equal(sumOf(m, 'llm_token_estimate_ratio_count', labels), 1)
  t.equal(sumOf(m, 'llm_token_estimate_ratio_sum', labels), 0.5, 'estimate 4 ÷ usage 8')
  t.same(buckets(m, 'llm_tokens_per_chunk', labels)['2'], 4, 'after reconciling with usage every chunk carries 2 tokens')
})

t.test('goodput: each request is judged once against its route SLO, errors missed, caller errors and non-streams not judged', async (t) => {
  const clock = new VirtualClock()
  const sim = await startHeldSimulator()
  t.teardown(() => sim.close())
  const proxy = await startProxy(
    {
      routes: [
        { prefix: '/slo', upstream: sim.url, slo: { ttft_seconds: 1, itl_p99_seconds: 0.5 } },
        { prefix: '/ttft-only', upstream: sim.url, slo: { ttft_seconds: 1 } },
      ],
    },
    { now: clock.now },
  )
  t.teardown(() => proxy.close())
  const received = new Received()
  const client = new OpenAI({ baseURL: `${proxy.url}/slo/v1`, apiKey: 'sk-test', maxRetries: 0, fetch: watchedFetch(received) })
  const ttftOnly = new OpenAI({ baseURL: `${proxy.url}/ttft-only/v1`, apiKey: 'sk-test', maxRetries: 0, fetch: watchedFetch(received) })
  const run = async (plan: Parameters<typeof simPlan>[0], c = client): Promise<void> => {
    const reading = (async () => {
      try {
        const stream = await c.chat.completions.create({ model: 'm', messages: [], stream: true }, simPlan(plan))
        for await (const _ of stream) void _
      } catch {
        // error plans end here
      }
    })()
    await play(proxy, clock, sim, received)
    await reading
  }
  await run({
    ttft_ms: 20,
    chunks: [
      [20, 1],
      [20, 1],
    ],
  }) // met
  await run({ ttft_ms: 1500, chunks: [[20, 1]] }) // missed: TTFT
  await run({
    ttft_ms: 20,
    chunks: [
      [20, 1],
      [1200, 1],
    ],
  }) // missed: ITL P99 = 1.2 s
  await run({ ttft_ms: 20, chunks: [[1200, 10]] }) // met: 1.2 s over 10 tokens is 120 ms a token
  await run({ status: 500 }) // missed: server error
  await run({ status: 400 }) // not judged: the caller's error
  const models = rawCall(received, `${proxy.url}/slo/v1/models`, { method: 'GET' })
  await play(proxy, clock, sim, received) // not judged: no generation
  await models.done
  await run(
    {
      ttft_ms: 20,
      chunks: [
        [20, 1],
        [1200, 1],
      ],
    },
    ttftOnly,
  ) // met: this route has no ITL bound
  await proxy.waitForRequests(8)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_slo_requests_total', { route: '/slo', slo: 'met' }), 2)
  t.equal(sumOf(m, 'llm_slo_requests_total', { route: '/slo', slo: 'missed' }), 3)
  t.equal(sumOf(m, 'llm_slo_requests_total', { route: '/ttft-only', slo: 'met' }), 1)
  t.same(
    select(m, 'llm_slo_requests_total', { route: '/ttft-only', slo: 'missed' }).map((x) => x.value),
    [0],
    'the missed series exists at 0 from the first judged request',
  )
})

t.test('a cancelled request is missed when it had waited past the TTFT bound, else not judged', async (t) => {
  const clock = new VirtualClock()
  const sim = await startHeldSimulator()
  t.teardown(() => sim.close())
  const proxy = await startProxy({ routes: [{ prefix: '/slo', upstream: sim.url, slo: { ttft_seconds: 1 } }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  const received = new Received()
  const post = (plan: Record<string, unknown>) =>
    rawCall(received, `${proxy.url}/slo/v1/chat/completions`, {
      headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(plan) },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
  // Waits 1.5 s for a first token due at 3 s, then gives up.
  let start = clock.now()
  const late = post({ ttft_ms: 3000, chunks: [[10, 1]] })
  await playSteps(clock, sim, received, { steps: 1 }) // the headers and the role-only first event
  clock.set(start + 1500)
  late.abort()
  await proxy.waitForRequests(1)
  // Gets its first token after 10 ms, then leaves during a long pause.
  start = clock.now()
  const early = post({ ttft_ms: 10, chunks: [[5000, 1]] })
  await playSteps(clock, sim, received, { steps: 2 })
  clock.set(start + 2000)
  early.abort()
  const lines = await proxy.waitForRequests(2)
  t.same(
    lines.map((l) => l.outcome),
    ['cancelled', 'cancelled'],
  )
  t.same(
    lines.map((l) => l.e2e_ms),
    [1500, 2000],
    'each ended when its client left',
  )
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_slo_requests_total', { slo: 'missed' }), 1, 'the one that waited past the bound')
  t.equal(sumOf(m, 'llm_slo_requests_total', { slo: 'met' }), 0, 'leaving is never a success')
})
