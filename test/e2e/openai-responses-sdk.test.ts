import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { FIRST_TOKENS, N, PLAN, checkStreamMetrics, normalise, startDirectSim } from '../helpers/provider-e2e.ts'

const MODEL = 'gpt-4.1-mini'

async function streamEvents(client: OpenAI): Promise<{ events: unknown[]; text: string; output?: number }> {
  const stream = await client.responses.create({ model: MODEL, input: 'count', stream: true }, simPlan(PLAN))
  const events: unknown[] = []
  let text = ''
  let output: number | undefined
  for await (const event of stream) {
    events.push(event)
    if (event.type === 'response.output_text.delta') text += event.delta
    if (event.type === 'response.completed') output = event.response.usage?.output_tokens
  }
  return { events, text, output }
}

t.test('the official OpenAI SDK streams the Responses API through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const direct = await startDirectSim()
  t.teardown(() => direct.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-resp-secret', maxRetries: 0 })

  const REQUESTS = 3
  const received: string[] = []
  for (let r = 0; r < REQUESTS; r++) {
    const { events, text, output } = await streamEvents(client)
    t.equal(text.split(' ').length - 1, N, 'the client received every token')
    t.equal(output, N, 'the client received the usage')
    received.push(normalise(events))
  }
  const straight = await streamEvents(new OpenAI({ baseURL: `${direct.url}/v1`, apiKey: 'k', maxRetries: 0 }))
  for (const r of received) t.equal(r, normalise(straight.events), 'through the proxy the client gets the very events it gets directly')

  const lines = await proxy.waitForRequests(REQUESTS)
  await checkStreamMetrics(t, proxy, { provider: 'openai', model: MODEL, route: '/sim' }, REQUESTS)
  for (const line of lines) {
    t.equal(line.provider, 'openai')
    t.equal(line.output_tokens, N)
    t.notMatch(JSON.stringify(line), /sk-resp-secret/, 'the API key is never logged')
  }
})

t.test('a non-streamed Responses answer counts its usage with no first-token time', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'k', maxRetries: 0 })
  const response = await client.responses.create({ model: MODEL, input: 'hi' }, simPlan(PLAN))
  t.equal(response.usage?.output_tokens, N)
  t.equal(response.output_text.split(' ').length - 1, N)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'openai', model: MODEL }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), N)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 0)
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), 1)
})

t.test('an error event inside a Responses stream makes the request an error', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'k', maxRetries: 0 })
  const seen: string[] = []
  try {
    const stream = await client.responses.create({ model: MODEL, input: 'hi', stream: true }, simPlan({ ...PLAN, error_after: 1 }))
    for await (const event of stream) seen.push(event.type)
  } catch {
    // Whether the SDK raises on the error event or hands it over, the proxy must see an error.
  }
  t.ok(seen.includes('response.output_text.delta'), 'the first delta reached the client')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.error, 'server_error')
  t.equal(line.streamed_tokens, FIRST_TOKENS)
})
