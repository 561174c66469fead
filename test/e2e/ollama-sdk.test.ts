import t from 'tap'
import { Ollama } from 'ollama'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { GAPS, N, PLAN, checkStreamMetrics, startDirectSim } from '../helpers/provider-e2e.ts'

/** A streamed part without what differs between any two requests (wall-clock times, durations). */
const stable = (part: object): unknown => JSON.parse(JSON.stringify(part, (k, v) => (k === 'created_at' || k.endsWith('_duration') ? undefined : v)))

t.test('the official ollama client streams chat through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute('/sim')] })
  t.teardown(() => proxy.close())
  // The same simulator, reached directly, to compare what the client receives.
  const direct = await startDirectSim()
  t.teardown(() => direct.close())

  const run = async (host: string): Promise<{ parts: unknown[]; text: string; evalCount?: number }> => {
    const ollama = new Ollama({ host, headers: simPlan(PLAN).headers })
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
  const straight = await run(direct.url)
  for (const got of through) {
    t.same(got.parts, straight.parts, 'the client receives what it gets directly')
    t.equal(got.text.split(' ').length - 1, N, 'every token arrived')
    t.equal(got.evalCount, N)
  }

  const lines = await proxy.waitForRequests(REQUESTS)
  const m = await proxy.scrape()
  const labels = { provider: 'ollama', model: 'llama3.2', route: '/sim' }
  await checkStreamMetrics(t, proxy, labels, REQUESTS)
  t.ok(sumOf(m, 'llm_input_tokens_total', labels) > 0, 'prompt_eval_count is the input')
  for (const line of lines) {
    t.equal(line.provider, 'ollama')
    t.equal(line.chunks, GAPS.length + 1)
    t.equal(line.streamed_tokens, N)
    t.equal(typeof line.eval_rate_tps, 'number', "Ollama's own rate is in the log line")
    t.ok((line.eval_duration_ms as number) > 0, 'and its decode time')
  }
})

t.test('ollama generate streams and a stream:false chat counts its usage with no TTFT', async (t) => {
  const proxy = await startProxy({ routes: [simRoute('/sim')] })
  t.teardown(() => proxy.close())
  const ollama = new Ollama({
    host: `${proxy.url}/sim`,
    headers: simPlan({
      ttft_ms: 10,
      chunks: [
        [10, 1],
        [10, 2],
      ],
    }).headers,
  })
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
  const ollama = new Ollama({
    host: `${proxy.url}/sim`,
    headers: simPlan({
      ttft_ms: 10,
      chunks: [
        [10, 1],
        [10, 1],
      ],
      error_after: 2,
    }).headers,
  })
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
