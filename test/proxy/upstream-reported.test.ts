import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { fixture } from '../helpers/feed.ts'
import { replay, startUpstream } from '../helpers/upstream.ts'

/**
 * The upstream's own timings through the whole record path: a recorded Ollama stream replayed
 * by a real upstream, through the proxy, to /metrics, the log line and /debug/requests.
 */

const OLLAMA = fixture('ollama/api-chat-stream.ndjson')
/** Its final object, in ns: load, prompt eval, eval and total durations. */
const NS = { load: 38473250, prompt: 27608250, generation: 105611917, total: 171946792 }

t.test("a replayed Ollama stream records each reported phase once, exactly, and the first token's wait outside Ollama", async (t) => {
  const lines = OLLAMA.toString('utf8').split(/(?<=\n)/)
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' })
    // The first line 120 ms late: a first token Ollama's 66 ms of load and prompt do not cover.
    await replay(
      res,
      lines.map((bytes, i) => ({ afterMs: i === 0 ? 120 : 0, bytes })),
    )
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/ollama', upstream: upstream.url, provider: 'ollama' }] })
  t.teardown(() => proxy.close())
  await fetch(`${proxy.url}/ollama/api/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"gemma3:1b"}' }).then((r) => r.text())
  const [line] = await proxy.waitForRequests(1)

  const m = await proxy.scrape()
  const labels = { provider: 'ollama', route: '/ollama', model: 'gemma3:1b' }
  for (const [phase, ns] of Object.entries(NS)) {
    t.equal(sumOf(m, 'llm_upstream_reported_seconds_count', { ...labels, phase }), 1, `${phase}: one observation`)
    t.equal(Math.round(sumOf(m, 'llm_upstream_reported_seconds_sum', { ...labels, phase }) * 1e9), ns, `${phase}: ${ns} ns`)
  }
  t.same(select(m, 'llm_upstream_reported_seconds_count', { phase: 'queue' }), [], 'Ollama reports no queue time: no series')
  t.equal(line.upstream_load_ms, 38.473)
  t.equal(line.upstream_prompt_ms, 27.608)
  t.equal(line.upstream_generation_ms, 105.612)
  t.equal(line.upstream_total_ms, 171.947)
  t.equal(line.upstream_queue_ms, undefined)

  // TTFT − (load + prompt), both from the same measurement; the log line rounds each to the µs.
  const ttftMs = line.ttft_ms as number
  const outsideMs = line.ttft_outside_upstream_ms as number
  t.ok(ttftMs >= 120, `TTFT ${ttftMs} ms`)
  t.ok(Math.abs(outsideMs - (ttftMs - (NS.load + NS.prompt) / 1e6)) < 0.002, `outside ${outsideMs} ms = TTFT ${ttftMs} ms − 66.082 ms`)
  t.equal(sumOf(m, 'llm_first_token_outside_upstream_seconds_count', labels), 1)
  t.equal(Math.round(sumOf(m, 'llm_first_token_outside_upstream_seconds_sum', labels) * 1e6) / 1e3, outsideMs)

  const debug = (await (await fetch(`${proxy.adminUrl}/debug/requests/${encodeURIComponent(line.request_id as string)}`)).json()) as Record<string, unknown>
  for (const key of ['upstream_load_ms', 'upstream_prompt_ms', 'upstream_generation_ms', 'upstream_total_ms', 'ttft_outside_upstream_ms']) t.equal(debug[key], line[key], `/debug/requests ${key}`)
  t.equal(debug.upstream_queue_ms, null)
})

t.test('a stream whose upstream reports no timings records none of these series', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end('data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m","stream":true}' }).then((r) => r.text())
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  t.same(select(m, 'llm_upstream_reported_seconds_count'), [])
  t.equal(sumOf(m, 'llm_first_token_outside_upstream_seconds_count'), 0)
})

t.test("a whole TGI /generate answer's x-queue-time and x-total-time headers (ms, as its router writes them) are its queue and total", async (t) => {
  const upstream = await startUpstream((_req, res) => {
    // As router/src/server.rs `generate_internal` sets them: whole milliseconds.
    res.writeHead(200, {
      'content-type': 'application/json',
      'x-compute-type': 'gpu+optimized',
      'x-total-time': '1250',
      'x-validation-time': '2',
      'x-queue-time': '375',
      'x-inference-time': '873',
      'x-time-per-token': '17',
    })
    res.end('{"generated_text":"Hi","details":{"finish_reason":"length","generated_tokens":50}}')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/tgi', upstream: upstream.url, provider: 'tgi' }] })
  t.teardown(() => proxy.close())
  await fetch(`${proxy.url}/tgi/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"inputs":"Hi"}' }).then((r) => r.text())
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.upstream_queue_ms, 375)
  t.equal(line.upstream_total_ms, 1250)
  t.equal(line.upstream_prompt_ms, undefined, 'x-inference-time is prefill and decode together: no single phase')
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_upstream_reported_seconds_sum', { provider: 'tgi', phase: 'queue' }), 0.375)
  t.equal(sumOf(m, 'llm_upstream_reported_seconds_sum', { provider: 'tgi', phase: 'total' }), 1.25)
  t.equal(sumOf(m, 'llm_first_token_outside_upstream_seconds_count'), 0, 'a whole answer has no first token')
  t.equal(line.client_write_wait_ms, undefined, 'nor is it a stream')
})
