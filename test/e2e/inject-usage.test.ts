import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { startUpstream } from '../helpers/upstream.ts'

const plan = {
  ttft_ms: 20,
  first_tokens: 2,
  chunks: [
    [10, 1],
    [10, 3],
    [10, 1],
  ] as [number, number][],
}
const N = 7

/** A chunk without what differs between any two requests (ids, times). */
const stable = (chunk: object): unknown => JSON.parse(JSON.stringify(chunk, (k, v) => (k === 'id' || k === 'created' || k === 'tokentap_sent_ms' ? undefined : v)))

t.test('with inject_usage the OpenAI SDK gets exactly the stream it asked for, and the proxy counts the provider usage', async (t) => {
  const proxy = await startProxy({ routes: [{ ...simRoute('/inj'), inject_usage: true }, simRoute('/plain')] })
  t.teardown(() => proxy.close())
  const run = async (prefix: string): Promise<unknown[]> => {
    const client = new OpenAI({ baseURL: `${proxy.url}${prefix}/v1`, apiKey: 'sk-test' })
    const stream = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'count' }], stream: true }, simPlan(plan))
    const chunks: unknown[] = []
    for await (const chunk of stream) chunks.push(stable(chunk))
    return chunks
  }
  const injected = await run('/inj')
  const direct = await run('/plain')
  t.same(injected, direct, 'chunk for chunk the same as without injection')
  t.notOk(JSON.stringify(injected).includes('"usage":{'), 'no usage chunk reached the client')

  const raw = async (prefix: string): Promise<string[]> => {
    const res = await fetch(`${proxy.url}${prefix}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...simPlan(plan).headers },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [], stream: true }),
    })
    t.equal(res.headers.get('content-length'), null)
    return (await res.text()).split('\n\n').map((e) => e.replace(/"(id|created|tokentap_sent_ms)":[^,]*,/g, ''))
  }
  t.same(await raw('/inj'), await raw('/plain'), 'byte for byte the same events (ids and times aside)')

  await proxy.waitForRequests(4)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_usage_injections_total', { provider: 'openai', model: 'gpt-4o-mini', route: '/inj' }), 2, "counted with the request's provider, model and route labels")
  t.equal(sumOf(m, 'llm_usage_injections_total', { route: '/plain' }), 0)
  t.equal(sumOf(m, 'llm_output_tokens_total', { route: '/inj', source: 'usage' }), 2 * N, 'the proxy used the injected usage')
  t.equal(sumOf(m, 'llm_output_tokens_total', { route: '/plain', source: 'estimate' }), 2 * N)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', { route: '/inj' }), 2 * (N - 2))
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { route: '/inj' }), 2)
})

t.test("a client's own stream_options, a whole answer and other paths are never changed", async (t) => {
  const proxy = await startProxy({ routes: [{ ...simRoute('/inj'), inject_usage: true }] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/inj/v1`, apiKey: 'sk-test' })
  const stream = await client.chat.completions.create({ model: 'm', messages: [], stream: true, stream_options: { include_usage: true } }, simPlan(plan))
  let usage: number | undefined
  for await (const c of stream) if (c.usage) usage = c.usage.completion_tokens
  t.equal(usage, N, 'a client that asked for usage gets it')
  const off = await client.chat.completions.create({ model: 'm', messages: [], stream: true, stream_options: { include_usage: false } }, simPlan(plan))
  for await (const c of off) t.notOk(c.usage, 'include_usage:false is respected')
  const whole = await client.chat.completions.create({ model: 'm', messages: [] }, simPlan(plan))
  t.equal(whole.usage?.completion_tokens, N)
  const refused = await fetch(`${proxy.url}/inj/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-tokentap-sim': '{"status":429}' },
    body: '{"model":"m","stream":true}',
  })
  t.equal(refused.status, 429)
  t.match(await refused.json(), { error: { code: 'sim_429' } }, 'an error answer to an injected request passes as it came')
  await proxy.waitForRequests(4)
  t.equal(sumOf(await proxy.scrape(), 'llm_usage_injections_total'), 1, 'only the request without stream_options was injected')
})

t.test('the upstream gets the body with include_usage and a matching Content-Length', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    const sse = 'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: {"choices":[],"usage":{"completion_tokens":1}}\n\n'
    res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': String(Buffer.byteLength(sse)) })
    res.end(sse)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ server: { body_limit_bytes: 2048 }, routes: [{ prefix: '/u', upstream: upstream.url, inject_usage: true }] })
  t.teardown(() => proxy.close())
  const body = '{"model":"m","stream":true,"messages":[]}'
  const res = await fetch(`${proxy.url}/u/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'accept-encoding': 'gzip' }, body })
  const text = await res.text()
  t.equal(res.headers.get('content-length'), null, 'the length the upstream declared is not passed on')
  t.equal(text, 'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n')
  const seen = upstream.requests[0]
  t.equal(seen.body.toString(), '{"model":"m","stream":true,"messages":[],"stream_options":{"include_usage":true}}')
  const header = (name: string) => seen.rawHeaders[seen.rawHeaders.findIndex((h, i) => i % 2 === 0 && h.toLowerCase() === name) + 1]
  t.equal(header('content-length'), String(seen.body.length))
  t.equal(header('accept-encoding'), 'identity')

  const chunked = await fetch(`${proxy.url}/u/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode('{"stream":false,'))
        c.enqueue(new TextEncoder().encode('"model":"x"}'))
        c.close()
      },
    }),
    duplex: 'half',
  } as RequestInit)
  await chunked.text()
  t.equal(upstream.requests[1].body.toString(), '{"stream":false,"model":"x"}', 'a chunked body is buffered and sent unchanged')

  const big = await fetch(`${proxy.url}/u/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(`{"stream":true,"x":"${'a'.repeat(3000)}"}`))
        c.close()
      },
    }),
    duplex: 'half',
  } as RequestInit)
  t.equal(big.status, 413, 'the body limit holds for a buffered body')
  t.equal(upstream.requests.length, 2)
  const lines = await proxy.waitForRequests(3)
  t.equal(lines[0].model, 'm')
  t.equal(lines[0].output_source, 'usage')
})
