import t from 'tap'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { sumOf } from '../helpers/prometheus.ts'

const chat = (url: string, model: string, plan = { ttft_ms: 1, first_tokens: 1, chunks: [[1, 1]] as [number, number][] }): Promise<string> =>
  fetch(`${url}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...simPlan(plan).headers },
    body: JSON.stringify({ model, stream: true, messages: [] }),
  }).then((r) => r.text())

t.test("a request whose model label is folded into 'other' still logs its own model name, cut to 256 characters", async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], limits: { max_models_per_route: 1 } })
  t.teardown(() => proxy.close())
  const long = `m-${'x'.repeat(300)}`
  await chat(proxy.url, 'first-model')
  await chat(proxy.url, 'second-model')
  await chat(proxy.url, long)
  const lines = await proxy.waitForRequests(3)
  t.equal(lines[0].model, 'first-model')
  t.equal(lines[0].model_label, undefined, 'no separate label when the label is the model')
  t.equal(lines[1].model, 'second-model', "the request's own model, not 'other'")
  t.equal(lines[1].model_label, 'other')
  t.equal((lines[2].model as string).length, 257, '256 characters and an ellipsis')
  t.ok((lines[2].model as string).startsWith('m-xxx'))
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { model: 'other' }), 2, 'the metrics still fold them')
})

t.test('bytes_out counts the error bodies the proxy wrote itself', async (t) => {
  const proxy = await startProxy({ routes: [{ prefix: '/dead', upstream: 'http://127.0.0.1:9', provider: 'openai' }] })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/dead/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m"}' })
  const body = Buffer.from(await res.arrayBuffer())
  t.equal(res.status, 502)
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.error, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  t.equal(line.bytes_out, body.length, 'the JSON error body, byte for byte')
  t.equal(line.status, 502)
})

t.test('a stream the upstream breaks off mid-way logs a typed failure code with the underlying one as detail', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n', () => res.socket?.destroy())
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m","stream":true}' })
    .then((r) => r.text())
    .catch(() => '')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.error, 'TOKENTAP_ERR_UPSTREAM_RESET')
  t.type(line.error_detail, 'string')
  t.equal(line.chunks, 1, 'the content that arrived is still measured')
})

t.test('a failed request logs its line at warn, a good or cancelled one at info', async (t) => {
  const upstream = await startUpstream((req, res) => {
    res.writeHead(req.url === '/v1/bad' ? 401 : 200, { 'content-type': 'application/json' })
    res.end('{}')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await (await fetch(`${proxy.url}/up/v1/good`, { method: 'POST', body: '{}' })).text()
  await (await fetch(`${proxy.url}/up/v1/bad`, { method: 'POST', body: '{}' })).text()
  const lines = await proxy.waitForRequests(2)
  t.same(
    lines.map((l) => [l.path, l.outcome, l.level]),
    [
      ['/v1/good', 'ok', 30],
      ['/v1/bad', 'error', 40],
    ],
  )
})
