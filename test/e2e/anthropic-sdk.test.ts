import t from 'tap'
import Anthropic from '@anthropic-ai/sdk'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { N, PLAN, checkStreamMetrics, normalise, startDirectSim } from '../helpers/provider-e2e.ts'

const MODEL = 'claude-sonnet-5-5'

async function streamEvents(client: Anthropic): Promise<{ events: unknown[]; text: string; output?: number }> {
  const stream = await client.messages.create({ model: MODEL, max_tokens: 1024, stream: true, messages: [{ role: 'user', content: 'count' }] }, simPlan(PLAN))
  const events: unknown[] = []
  let text = ''
  let output: number | undefined
  for await (const event of stream) {
    events.push(event)
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text
    if (event.type === 'message_delta') output = event.usage.output_tokens
  }
  return { events, text, output }
}

t.test('the official Anthropic SDK streams through the proxy and every metric matches the schedule', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const direct = await startDirectSim()
  t.teardown(() => direct.close())
  const client = new Anthropic({ baseURL: `${proxy.url}/sim`, apiKey: 'sk-ant-secret', maxRetries: 0 })

  const REQUESTS = 3
  const received: string[] = []
  for (let r = 0; r < REQUESTS; r++) {
    const { events, text, output } = await streamEvents(client)
    t.equal(text.split(' ').length - 1, N, 'the client received every token')
    t.equal(output, N, 'the client received the usage')
    received.push(normalise(events))
  }
  const straight = await streamEvents(new Anthropic({ baseURL: direct.url, apiKey: 'k', maxRetries: 0 }))
  for (const r of received) t.equal(r, normalise(straight.events), 'through the proxy the client gets the very events it gets directly')

  const lines = await proxy.waitForRequests(REQUESTS)
  await checkStreamMetrics(t, proxy, { provider: 'anthropic', model: MODEL, route: '/sim' }, REQUESTS)
  for (const line of lines) {
    t.equal(line.provider, 'anthropic')
    t.equal(line.output_tokens, N)
    t.notMatch(JSON.stringify(line), /sk-ant-secret/, 'the API key is never logged')
  }
})

t.test('a non-streamed Anthropic message counts its usage with no first-token time', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new Anthropic({ baseURL: `${proxy.url}/sim`, apiKey: 'k', maxRetries: 0 })
  const message = await client.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }, simPlan(PLAN))
  t.equal(message.usage.output_tokens, N)
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { provider: 'anthropic', model: MODEL }
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), N)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 0)
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), 1)
})

t.test('an Anthropic error event inside the stream makes the request an error; its content still counts', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new Anthropic({ baseURL: `${proxy.url}/sim`, apiKey: 'k', maxRetries: 0 })
  const stream = await client.messages.create({ model: MODEL, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] }, simPlan({ ...PLAN, error_after: 2 }))
  await t.rejects(async () => {
    for await (const _ of stream) {
      // drain until the SDK raises the error event
    }
  }, 'the SDK raises the error event')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.error, 'overloaded_error')
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { provider: 'anthropic', outcome: 'error' }), 1)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { provider: 'anthropic' }), 1, 'the content that arrived was still a first token')
})
