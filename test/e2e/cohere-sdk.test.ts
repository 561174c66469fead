import t from 'tap'
import { CohereClientV2 } from 'cohere-ai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { N, PLAN, checkStreamMetrics, normalise, startDirectSim } from '../helpers/provider-e2e.ts'

const MODEL = 'command-a-03-2025'

async function streamEvents(client: CohereClientV2, plan = PLAN): Promise<{ events: unknown[]; text: string; output?: number; error?: string }> {
  const stream = await client.chatStream({ model: MODEL, messages: [{ role: 'user', content: 'count' }] }, simPlan(plan))
  const events: unknown[] = []
  let text = ''
  let output: number | undefined
  let error: string | undefined
  for await (const event of stream) {
    events.push(event)
    if (event.type === 'content-delta') text += event.delta?.message?.content?.text ?? ''
    if (event.type === 'message-end') {
      output = event.delta?.usage?.tokens?.outputTokens
      error = event.delta?.error
    }
  }
  return { events, text, output, error }
}

t.test('the official Cohere SDK streams /v2/chat through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const direct = await startDirectSim()
  t.teardown(() => direct.close())
  const client = new CohereClientV2({ token: 'co-secret-key', baseUrl: `${proxy.url}/sim` })

  const REQUESTS = 3
  const received: string[] = []
  for (let r = 0; r < REQUESTS; r++) {
    const { events, text, output } = await streamEvents(client)
    t.equal(text.split(' ').length - 1, N, 'the client received every token')
    t.equal(output, N, 'the client received the usage')
    received.push(normalise(events))
  }
  const straight = await streamEvents(new CohereClientV2({ token: 'k', baseUrl: direct.url }))
  for (const r of received) t.equal(r.replace(/-\d{12}"/g, '"'), normalise(straight.events).replace(/-\d{12}"/g, '"'), 'through the proxy the client gets the very events it gets directly')

  const lines = await proxy.waitForRequests(REQUESTS)
  await checkStreamMetrics(t, proxy, { provider: 'cohere', model: MODEL, route: '/sim' }, REQUESTS)
  for (const line of lines) {
    t.equal(line.provider, 'cohere', 'detected from the path')
    t.equal(line.output_tokens, N)
    t.notMatch(JSON.stringify(line), /co-secret-key/, 'the API key is never logged')
  }
})

t.test('a non-streamed Cohere chat counts its usage with no first-token time', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new CohereClientV2({ token: 'k', baseUrl: `${proxy.url}/sim` })
  const answer = await client.chat({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }, simPlan(PLAN))
  t.equal(answer.usage?.tokens?.outputTokens, N)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'cohere', model: MODEL }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), N)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 0)
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), 1)
})

t.test('a Cohere error inside the stream makes the request an error; its content still counts', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new CohereClientV2({ token: 'k', baseUrl: `${proxy.url}/sim` })
  const { error } = await streamEvents(client, { ...PLAN, error_after: 2 })
  t.equal(error, 'simulated error inside the stream', 'the SDK hands over the error on message-end')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.error, 'simulated error inside the stream')
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { provider: 'cohere', outcome: 'error' }), 1)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { provider: 'cohere' }), 1, 'the content that arrived was still a first token')
})
