import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import type { FastifyReply, FastifyRequest } from 'fastify'
import rateLimit from '@fastify/rate-limit'
import pino from 'pino'
import t from 'tap'
import tokentap from '../src/plugin.ts'
import { parseMetrics, sumOf } from './helpers/prometheus.ts'
import { startUpstream } from './helpers/upstream.ts'

const EVENTS = [
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { content: 'one' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { content: ' two' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { content: ' three' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } },
]
const SSE = `${EVENTS.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`

t.test("the user's onRequest API-key check and @fastify/rate-limit apply to proxied streams", async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.end(SSE)
  })
  t.teardown(() => upstream.close())

  const app = Fastify({ loggerInstance: pino({ level: 'silent' }) })
  await app.register(rateLimit, { max: 1, timeWindow: 60_000 })
  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.url.startsWith('/llm') && request.headers['x-api-key'] !== 'let-me-in') await reply.code(401).send({ error: 'missing or wrong x-api-key' })
  })
  // One of the user's own routes, beside the proxy's: its JSON body still parses.
  app.post('/echo', async (request) => request.body)
  await app.register(tokentap, { routes: [{ prefix: '/llm', upstream: upstream.url, provider: 'openai' }] })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`

  const chat = (key?: string): Promise<Response> =>
    fetch(`${base}/llm/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'x-api-key': key }) },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'count' }] }),
    })

  const refused = await chat()
  t.equal(refused.status, 401, 'no key: the hook answers')
  t.same(await refused.json(), { error: 'missing or wrong x-api-key' })
  t.equal(upstream.requests.length, 0, 'a refused request never reaches the upstream')

  const allowed = await chat('let-me-in')
  t.equal(allowed.status, 200)
  t.equal(await allowed.text(), SSE, 'the stream arrives byte for byte')
  t.equal(upstream.requests.length, 1)

  const limited = await chat('let-me-in')
  t.equal(limited.status, 429, 'the second keyed request in the window is over the limit of 1 (the hook refused the first before the limiter counted it)')
  t.equal(upstream.requests.length, 1, 'a rate-limited request never reaches the upstream')

  const echo = await fetch(`${base}/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' })
  t.equal(echo.status, 429, "the user's own routes share the limiter")

  // Requests are recorded as their response closes, just after the client read the end.
  while (app.tokentap.active.size > 0) await new Promise((r) => setImmediate(r))
  const samples = parseMetrics(await app.tokentap.registry.text())
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/llm' }
  t.equal(sumOf(samples, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200', error_type: 'none' }), 1, 'the forwarded request')
  // The refused ones are counted as the app's own answers (their body was never read: no model).
  const refusedLabels = { provider: 'openai', model: 'unknown', route: '/llm', outcome: 'error', error_type: 'policy' }
  t.equal(sumOf(samples, 'llm_requests_total', { ...refusedLabels, status_code: '401' }), 1, "the API-key hook's 401 is error_type policy")
  t.equal(sumOf(samples, 'llm_requests_total', { ...refusedLabels, status_code: '429' }), 1, "@fastify/rate-limit's 429 is error_type policy, not the provider's")
  t.equal(sumOf(samples, 'llm_requests_total'), 3, "the user's own route is not counted")
  t.equal(sumOf(samples, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(samples, 'llm_inter_token_latency_seconds_count', labels), 2, 'N − k_1 = 3 − 1')
  t.equal(sumOf(samples, 'llm_inter_chunk_latency_seconds_count', labels), 2)
  t.equal(sumOf(samples, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 3)
  t.equal(sumOf(samples, 'llm_input_tokens_total', labels), 7)
  t.equal(sumOf(samples, 'llm_requests_in_flight'), 0)
})

t.test('the plugin leaves the body to the upstream: a large chunked upload streams through unread by Fastify', async (t) => {
  const upstream = await startUpstream((req, res, body) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ bytes: body.length, type: req.headers['content-type'] }))
  })
  t.teardown(() => upstream.close())
  const app = Fastify()
  await app.register(tokentap, { routes: [{ prefix: '/', upstream: upstream.url }] })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const body = Buffer.alloc(3 * 1024 * 1024, 0x61)
  const res = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/files`, { method: 'POST', headers: { 'content-type': 'application/x-custom' }, body })
  t.same(await res.json(), { bytes: body.length, type: 'application/x-custom' }, 'a content type Fastify has no parser for, over its 1 MiB body limit, arrives whole')
})

t.test('options are config parts as a caller writes them: what a nested part leaves out takes the schema’s default', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  // Typed as the config file is written (src/plugin.ts's ConfigInput), not as the validated config.
  await app.register(tokentap, {
    routes: [{ prefix: '/llm', upstream: 'http://127.0.0.1:9', slo: { ttft_seconds: 2 } }],
    metrics: { stall_seconds: 2 },
    otel: { traces: { endpoint: 'http://127.0.0.1:9/v1/traces', sample: { ratio: 0.5 } } },
  })
  await app.ready()
  const config = app.tokentap.config
  t.equal(config.metrics.stall_seconds, 2)
  t.same(config.otel.traces?.sample, { ratio: 0.5, keep: ['error', 'stall', 'slo_miss', 'slow'], slow_seconds: 10 }, 'the sample rules and threshold by default')
  t.equal(config.otel.traces?.propagate, false)
  t.equal(config.routes[0].slo?.ttft_seconds, 2)
  t.ok(app.tokentap.otelTraces, 'spans on')
})

t.test('options are validated like the config file, naming the key', async (t) => {
  const app = Fastify()
  await t.rejects(async () => {
    await app.register(tokentap, { routes: [{ prefix: 'no-slash', upstream: 'http://127.0.0.1:9' }] })
    await app.ready()
  }, /prefix/)
})
