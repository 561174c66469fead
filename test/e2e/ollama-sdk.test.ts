import t from 'tap'
import type { AddressInfo } from 'node:net'
import { Ollama } from 'ollama'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import type { SimulatorConfig } from '../../src/config/schema.ts'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { select, sumOf } from '../helpers/prometheus.ts'

// First chunk of 2 tokens at 60 ms, then [gap ms, tokens].
const FIRST = 2
const GAPS: [number, number][] = [
  [30, 1],
  [30, 2],
  [60, 1],
  [30, 3],
]
const N = FIRST + GAPS.reduce((n, [, k]) => n + k, 0)
const DECODE_S = GAPS.reduce((s, [g]) => s + g, 0) / 1000
const plan = { ttft_ms: 60, first_tokens: FIRST, chunks: GAPS }

/** A streamed part without what differs between any two requests (wall-clock times, durations). */
const stable = (part: object): unknown => JSON.parse(JSON.stringify(part, (k, v) => (k === 'created_at' || k.endsWith('_duration') ? undefined : v)))

t.test('the official ollama client streams chat through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute('/sim')] })
  t.teardown(() => proxy.close())
  // The same simulator, reached directly, to compare what the client receives.
  const direct = buildSimulator(proxy.config.routes[0].simulator as SimulatorConfig)
  await direct.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => direct.close())

  const run = async (host: string): Promise<{ parts: unknown[]; text: string; evalCount?: number }> => {
    const ollama = new Ollama({ host, headers: simPlan(plan).headers })
    const stream = await ollama.chat({ model: 'llama3.2', messages: [{ role: 'user', content: 'count' }], stream: true })
    const parts: unknown[] = []
    let text = ''
    let evalCount: number | undefined
    for await (const part of stream) {
      parts.push(stable(part))
      text += part.message.content
      if (part.done) evalCount = part.eval_count
    }
    return { parts, text, evalCount }
  }

  const REQUESTS = 2
  const through: Awaited<ReturnType<typeof run>>[] = []
  for (let r = 0; r < REQUESTS; r++) through.push(await run(`${proxy.url}/sim`))
  const straight = await run(`http://127.0.0.1:${(direct.server.address() as AddressInfo).port}`)
  for (const got of through) {
    t.same(got.parts, straight.parts, 'the client receives what it gets directly')
    t.equal(got.text.split(' ').length - 1, N, 'every token arrived')
    t.equal(got.evalCount, N)
  }

  const lines = await proxy.waitForRequests(REQUESTS)
  const m = await proxy.scrape()
  const labels = { provider: 'ollama', model: 'llama3.2', route: '/sim' }
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), REQUESTS, 'one TTFT per request')
  const ttftSum = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  // A shared, busy machine makes timers late (the first request also warms the JIT): wide bounds.
  t.ok(ttftSum >= 0.06 * REQUESTS && ttftSum < 0.6 * REQUESTS, `TTFT sum ${ttftSum} near ${REQUESTS} × 60 ms`)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), REQUESTS * (N - FIRST), 'ITL count = N − k1 per request')
  const itlSum = sumOf(m, 'llm_inter_token_latency_seconds_sum', labels)
  // Chunks are due at fixed offsets from the simulator's start (after t_req) and never go out
  // early, so a late first chunk shortens the window and a late last one lengthens it, by any
  // amount a loaded machine makes them late: per request t_last − t_first is at least the last
  // chunk's due time − TTFT, and at most E2E − TTFT (the response ends after its last chunk).
  const e2eSum = sumOf(m, 'llm_request_duration_seconds_sum', { ...labels, outcome: 'ok' })
  const itlLow = REQUESTS * (plan.ttft_ms / 1000 + DECODE_S) - ttftSum
  const itlHigh = e2eSum - ttftSum
  t.ok(itlSum > 0 && itlSum >= itlLow - 1e-6 && itlSum <= itlHigh + 1e-6, `ITL sum ${itlSum} ≈ ${REQUESTS * DECODE_S}: within [${itlLow}, ${itlHigh}]`)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), REQUESTS * GAPS.length)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), REQUESTS * N, "output tokens are Ollama's eval_count")
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'estimate' }), 0)
  t.ok(sumOf(m, 'llm_input_tokens_total', labels) > 0, 'prompt_eval_count is the input')
  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count', labels), REQUESTS)
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), REQUESTS)
  t.same(select(m, 'llm_requests_in_flight').map((s) => s.value), [0])
  for (const line of lines) {
    t.equal(line.provider, 'ollama')
    t.equal(line.chunks, GAPS.length + 1)
    t.equal(line.streamed_tokens, N)
    t.equal(typeof line.eval_rate_tps, 'number', "Ollama's own rate is in the log line")
    t.ok((line.eval_duration_ms as number) > 0, "and its decode time")
  }
})

t.test('ollama generate streams and a stream:false chat counts its usage with no TTFT', async (t) => {
  const proxy = await startProxy({ routes: [simRoute('/sim')] })
  t.teardown(() => proxy.close())
  const ollama = new Ollama({ host: `${proxy.url}/sim`, headers: simPlan({ ttft_ms: 10, chunks: [[10, 1], [10, 2]] }).headers })
  let text = ''
  for await (const part of await ollama.generate({ model: 'gemma3:1b', prompt: 'hi', stream: true })) text += part.response
  t.equal(text.split(' ').length - 1, 4)
  const whole = await ollama.chat({ model: 'qwen3', messages: [{ role: 'user', content: 'hi' }], stream: false })
  t.equal(whole.eval_count, 4)
  await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { model: 'gemma3:1b', provider: 'ollama' }), 1)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', { model: 'gemma3:1b' }), 3)
  t.equal(sumOf(m, 'llm_output_tokens_total', { model: 'gemma3:1b', source: 'usage' }), 4)
  t.equal(sumOf(m, 'llm_output_tokens_total', { model: 'qwen3', provider: 'ollama', source: 'usage' }), 4)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { model: 'qwen3' }), 0, 'a whole answer has no first token time')
})

t.test('an Ollama error line mid-stream makes the request an error; the client sees it too', async (t) => {
  const proxy = await startProxy({ routes: [simRoute('/sim')] })
  t.teardown(() => proxy.close())
  const ollama = new Ollama({ host: `${proxy.url}/sim`, headers: simPlan({ ttft_ms: 10, chunks: [[10, 1], [10, 1]], error_after: 2 }).headers })
  let seen = 0
  await t.rejects(async () => {
    for await (const part of await ollama.chat({ model: 'llama3.2', messages: [], stream: true })) seen += part.message.content ? 1 : 0
  }, /simulated error inside the stream/)
  t.equal(seen, 2)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { provider: 'ollama', outcome: 'error', status_code: '200' }), 1)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { provider: 'ollama' }), 1, 'the content that arrived is still timed')
})
