import t from 'tap'
import { fixture } from '../helpers/fixtures.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'

/**
 * vLLM's per-request `metrics` replayed through the proxy: its phases land in
 * llm_upstream_reported_seconds by vLLM's definitions, its speculative decoding in the two
 * counters, its prefix-cache read and write in llm_cached_input_tokens_total.
 */

t.test('a vLLM stream with per-request metrics: reported phases, speculative drafts and cache counts, exactly', async (t) => {
  const body = fixture('vllm/chat-per-request-metrics.sse')
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(body)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/vllm', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/vllm/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'meta-llama/Llama-3.1-8B-Instruct', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'What is the capital of France?' }] }),
  })
  t.same(Buffer.from(await res.arrayBuffer()), body, 'the bytes unchanged')
  const [line] = await proxy.waitForRequests(1)
  t.same([line.upstream_queue_ms, line.upstream_prompt_ms, line.upstream_generation_ms], [12.3, 85.2, 1240.5], 'the log line in ms')
  const samples = await proxy.scrape()
  const labels = { provider: 'openai', model: 'meta-llama/Llama-3.1-8B-Instruct', route: '/vllm' }
  for (const [phase, seconds] of [
    ['queue', 0.0123],
    ['prompt', 0.0852],
    ['generation', 1.2405],
  ] as const) {
    t.equal(sumOf(samples, 'llm_upstream_reported_seconds_count', { ...labels, phase }), 1, `${phase} observed once`)
    t.equal(Math.round(sumOf(samples, 'llm_upstream_reported_seconds_sum', { ...labels, phase }) * 1e4), Math.round(seconds * 1e4), `${phase} = ${seconds} s`)
  }
  t.equal(sumOf(samples, 'llm_first_token_outside_upstream_seconds_count', labels), 1, 'TTFT less queue and prompt, once')
  t.equal(sumOf(samples, 'llm_speculative_draft_tokens_total', labels), 129)
  t.equal(sumOf(samples, 'llm_speculative_accepted_tokens_total', labels), 10)
  t.equal(sumOf(samples, 'llm_cached_input_tokens_total', { ...labels, cache: 'read' }), 32)
  t.equal(sumOf(samples, 'llm_cached_input_tokens_total', { ...labels, cache: 'write' }), 10)
  t.equal(sumOf(samples, 'llm_input_tokens_total', labels), 42)
})

t.test('a stream without speculative decoding makes no speculative series', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(fixture('vllm/chat-vllm-0.24-crusoe-usage-chunk.sse'))
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/vllm', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await (await fetch(`${proxy.url}/vllm/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"stream":true}' })).text()
  await proxy.waitForRequests(1)
  const samples = await proxy.scrape()
  t.notOk(
    samples.some((s) => s.name.startsWith('llm_speculative_')),
    'no llm_speculative_ series',
  )
  t.equal(sumOf(samples, 'llm_upstream_reported_seconds_count'), 0, 'no reported phases')
})
