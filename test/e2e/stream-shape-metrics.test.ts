import t from 'tap'
import OpenAI from 'openai'
import { replay, startUpstream } from '../helpers/upstream.ts'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'

/** Cumulative bucket counts of a histogram's series, by `le`. */
function buckets(m: readonly Sample[], name: string, labels: Record<string, string>): Record<string, number> {
  const out: Record<string, number> = {}
  for (const s of select(m, `${name}_bucket`, labels)) out[s.labels.le] = (out[s.labels.le] ?? 0) + s.value
  return out
}

// First chunk (1 token) at 50 ms, then [gap ms, tokens]: two stalls (700 ms each, over
// stall_seconds 0.35) and a burst (4 then 8 tokens, the 8 with no gap at all). Chunks are due
// at offsets from the start, so a late chunk lengthens the gap before it and shortens the one
// after it: with every gap at least 340 ms from the threshold, a chunk made late by a loaded
// machine (a frozen process, CPU steal) by less than that neither adds a stall nor removes one.
const CHUNKS: [number, number][] = [[10, 1], [700, 1], [10, 4], [0, 8], [700, 2]]
const TOKENS = [1, ...CHUNKS.map(([, k]) => k)]
const N = TOKENS.reduce((a, b) => a + b, 0)

t.test('a schedule with two stalls and a burst gives exact stall, max-gap, tokens-per-chunk and phase figures', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { stall_seconds: 0.35 } })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  for (const includeUsage of [true, false]) {
    const stream = await client.chat.completions.create(
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'go' }], stream: true, stream_options: { include_usage: includeUsage } },
      simPlan({ ttft_ms: 50, first_tokens: 1, chunks: CHUNKS }),
    )
    let text = ''
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? ''
    t.equal(text.split(' ').length - 1, N)
  }
  const lines = await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/sim' }

  t.equal(sumOf(m, 'llm_stream_stalls_total', labels), 4, 'two stalls per request')
  t.equal(sumOf(m, 'llm_stream_max_gap_seconds_count', labels), 2, 'one longest gap per request')
  const maxGapSum = sumOf(m, 'llm_stream_max_gap_seconds_sum', labels)
  // Chunks are due at absolute times, so a late chunk shortens the gap after it: wide tolerances.
  t.ok(maxGapSum >= 0.8 && maxGapSum < 3, `max gap sum ${maxGapSum} ≈ 2 × 700 ms`)
  const gapBuckets = buckets(m, 'llm_stream_max_gap_seconds', labels)
  t.equal(gapBuckets['0.3'], 0, 'no request had its longest gap under 300 ms')
  t.equal(gapBuckets['+Inf'], 2)
  for (const line of lines) t.ok((line.max_gap_ms as number) >= 300, 'the log line shows the same stall')

  t.same(buckets(m, 'llm_tokens_per_chunk', labels), { 1: 6, 2: 8, 3: 8, 4: 10, 6: 10, 8: 12, 12: 12, 16: 12, 32: 12, 64: 12, '+Inf': 12 }, 'every chunk once, by its tokens')
  t.equal(sumOf(m, 'llm_tokens_per_chunk_sum', labels), 2 * N, 'the chunks carry every token')

  t.equal(sumOf(m, 'llm_time_to_response_headers_seconds_count', labels), 2, 'headers timed once per request')
  const headers = sumOf(m, 'llm_time_to_response_headers_seconds_sum', labels)
  const ttft = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  t.ok(headers >= 0 && headers < ttft, `headers (${headers}) come before the first token (${ttft})`)
  t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_count', labels), 2)
  t.equal(sumOf(m, 'llm_time_to_first_output_token_seconds_sum', labels), ttft, 'without reasoning the first output token is the first token')

  t.equal(sumOf(m, 'llm_token_estimate_ratio_count', labels), 1, 'only the request with usage has a ratio')
  t.same(buckets(m, 'llm_token_estimate_ratio', labels)['0.99'], 0)
  t.same(buckets(m, 'llm_token_estimate_ratio', labels)['1'], 1, 'the simulator’s words are exact tokens: ratio 1')
  t.same(select(m, 'llm_slo_requests_total'), [], 'no SLO series for a route without an slo')
})

const sse = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`
const chunk = (delta: Record<string, unknown>): string => sse({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'deepseek-reasoner', choices: [{ index: 0, delta, finish_reason: null }] })

t.test('reasoning before the answer separates the first output token from the first token, and usage below the estimate shows in the ratio', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'req_upstream_1' })
    res.flushHeaders()
    // Each piece after the previous one was written: with offsets from the start, a first reasoning
    // chunk made late by a loaded machine would go out together with the answer, and the visible
    // thinking time this test is about would shrink to nothing.
    void replay(res, [
      { afterMs: 0, bytes: chunk({ role: 'assistant', content: null, reasoning_content: '' }) },
      { afterMs: 300, bytes: chunk({ content: null, reasoning_content: ' the' }) },
      { afterMs: 10, bytes: chunk({ content: null, reasoning_content: ' of' }) },
      { afterMs: 200, bytes: chunk({ content: ' and' }) },
      { afterMs: 10, bytes: chunk({ content: ' to' }) },
      // The provider counts 8 output tokens for the 4 the tokenizer saw (e.g. hidden reasoning it does not break out).
      { afterMs: 0, bytes: sse({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'deepseek-reasoner', choices: [], usage: { prompt_tokens: 5, completion_tokens: 8, total_tokens: 13 } }) },
      { afterMs: 0, bytes: 'data: [DONE]\n\n' },
    ], { relative: true })
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/ds', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/ds/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'deepseek-reasoner', stream: true, messages: [] }) })
  await res.text()
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.request_id, 'req_upstream_1', 'with no client id the upstream’s x-request-id names the request')
  const m = await proxy.scrape()
  const labels = { model: 'deepseek-reasoner', route: '/ds' }
  const ttft = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  const ttfot = sumOf(m, 'llm_time_to_first_output_token_seconds_sum', labels)
  const headers = sumOf(m, 'llm_time_to_response_headers_seconds_sum', labels)
  t.ok(headers < ttft, `headers (${headers}) before the first chunk`)
  t.ok(ttft >= 0.3 && ttft < 2, `TTFT ${ttft} ≈ 300 ms (the first reasoning chunk)`)
  t.ok(ttfot - ttft >= 0.1 && ttfot - ttft < 1, `visible thinking time ${ttfot - ttft} ≈ 210 ms`)
  t.equal(sumOf(m, 'llm_token_estimate_ratio_count', labels), 1)
  t.equal(sumOf(m, 'llm_token_estimate_ratio_sum', labels), 0.5, 'estimate 4 ÷ usage 8')
  t.same(buckets(m, 'llm_tokens_per_chunk', labels)['2'], 4, 'after reconciling with usage every chunk carries 2 tokens')
})

t.test('goodput: each request is judged once against its route SLO, errors missed, caller errors and non-streams not judged', async (t) => {
  const proxy = await startProxy({
    routes: [
      { ...simRoute('/slo'), slo: { ttft_seconds: 1, itl_p99_seconds: 0.5 } },
      { ...simRoute('/ttft-only'), slo: { ttft_seconds: 1 } },
    ],
  })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/slo/v1`, apiKey: 'sk-test', maxRetries: 0 })
  const run = async (plan: Parameters<typeof simPlan>[0], c = client): Promise<void> => {
    try {
      const stream = await c.chat.completions.create({ model: 'm', messages: [], stream: true }, simPlan(plan))
      for await (const _ of stream) void _
    } catch {
      // error plans end here
    }
  }
  await run({ ttft_ms: 20, chunks: [[20, 1], [20, 1]] }) // met
  await run({ ttft_ms: 1500, chunks: [[20, 1]] }) // missed: TTFT
  await run({ ttft_ms: 20, chunks: [[20, 1], [1200, 1]] }) // missed: ITL P99 = 1.2 s
  await run({ ttft_ms: 20, chunks: [[1200, 10]] }) // met: 1.2 s over 10 tokens is 120 ms a token
  await run({ status: 500 }) // missed: server error
  await run({ status: 400 }) // not judged: the caller's error
  await fetch(`${proxy.url}/slo/v1/models`).then((r) => r.text()) // not judged: no generation
  const ttftOnly = new OpenAI({ baseURL: `${proxy.url}/ttft-only/v1`, apiKey: 'sk-test', maxRetries: 0 })
  await run({ ttft_ms: 20, chunks: [[20, 1], [1200, 1]] }, ttftOnly) // met: this route has no ITL bound
  await proxy.waitForRequests(8)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_slo_requests_total', { route: '/slo', slo: 'met' }), 2)
  t.equal(sumOf(m, 'llm_slo_requests_total', { route: '/slo', slo: 'missed' }), 3)
  t.equal(sumOf(m, 'llm_slo_requests_total', { route: '/ttft-only', slo: 'met' }), 1)
  t.same(select(m, 'llm_slo_requests_total', { route: '/ttft-only', slo: 'missed' }).map((x) => x.value), [0], 'the missed series exists at 0 from the first judged request')
})

t.test('a cancelled request is missed when it had waited past the TTFT bound, else not judged', async (t) => {
  const proxy = await startProxy({ routes: [{ ...simRoute('/slo'), slo: { ttft_seconds: 1 } }] })
  t.teardown(() => proxy.close())
  const post = (plan: Record<string, unknown>, signal: AbortSignal): Promise<Response> =>
    fetch(`${proxy.url}/slo/v1/chat/completions`, {
      method: 'POST',
      signal,
      headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(plan) },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    })
  // Waits 1.5 s for a first token due at 3 s, then gives up.
  const late = new AbortController()
  const lateRes = await post({ ttft_ms: 3000, chunks: [[10, 1]] }, late.signal)
  setTimeout(() => late.abort(), 1500)
  await lateRes.text().catch(() => {})
  await proxy.waitForRequests(1)
  // Gets its first token quickly, then leaves during a long pause.
  const early = new AbortController()
  const earlyRes = await post({ ttft_ms: 10, chunks: [[5000, 1]] }, early.signal)
  const reader = earlyRes.body?.getReader()
  let seen = ''
  while (!seen.includes('"content":" ')) {
    const r = await reader?.read()
    if (r === undefined || r.done) break
    seen += new TextDecoder().decode(r.value)
  }
  early.abort()
  await reader?.cancel().catch(() => {})
  const lines = await proxy.waitForRequests(2)
  t.same(lines.map((l) => l.outcome), ['cancelled', 'cancelled'])
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_slo_requests_total', { slo: 'missed' }), 1, 'the one that waited past the bound')
  t.equal(sumOf(m, 'llm_slo_requests_total', { slo: 'met' }), 0, 'leaving is never a success')
})
