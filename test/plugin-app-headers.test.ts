import { request } from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import cors from '@fastify/cors'
import rateLimit from '@fastify/rate-limit'
import pino from 'pino'
import t from 'tap'
import type { Test } from 'tap'
import tokentap from '../src/plugin.ts'
import { openRequest, readAll } from './helpers/http.ts'
import { parseMetrics, sumOf } from './helpers/prometheus.ts'
import { startUpstream } from './helpers/upstream.ts'

/**
 * The plugin inside an app with its own plugins in front (the real @fastify/cors and
 * @fastify/rate-limit): what they and the app's hooks set on the reply reaches the proxied
 * answer, merged with the upstream's headers by the rule in src/proxy/app-headers.ts.
 */

const EVENTS = [
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { content: 'one' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta: { content: ' two' } }] },
  { id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } },
]
const SSE = `${EVENTS.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`
const ORIGIN = 'https://app.example'
const BODY = JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'count' }] })

/** Every value of a header in a raw list (duplicates are what a browser would reject for CORS). */
const values = (raw: readonly string[], name: string): string[] => raw.filter((_v, i) => i % 2 === 1 && raw[i - 1].toLowerCase() === name)

async function setup(t: Test) {
  const upstream = await startUpstream((_req, res) => {
    // A provider's own CORS and rate-limit headers, and one the app sets too.
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'access-control-allow-origin': '*',
      'x-ratelimit-limit-requests': '10000',
      'x-served-by': 'upstream',
      vary: 'Accept-Encoding',
    })
    // Streamed: the head first, the events in separate writes.
    for (const e of EVENTS) res.write(`data: ${JSON.stringify(e)}\n\n`)
    res.end('data: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  const app = Fastify({ loggerInstance: pino({ level: 'silent' }) })
  // A list of origins: the answer reflects the request's Origin and adds `Vary: Origin`.
  await app.register(cors, { origin: [ORIGIN], credentials: true })
  await app.register(rateLimit, { max: 5, timeWindow: 60_000 })
  const hooks = { onSend: 0, onResponse: [] as number[] }
  app.addHook('onRequest', async (_request, reply) => {
    reply.header('x-app', 'yes')
    reply.header('x-served-by', 'app')
    // Never taken from the app: the body is the upstream's.
    reply.header('content-type', 'text/plain')
  })
  app.addHook('onSend', async () => {
    hooks.onSend++
  })
  app.addHook('onResponse', async (_request, reply) => {
    hooks.onResponse.push(reply.statusCode)
  })
  await app.register(tokentap, {
    routes: [
      { prefix: '/llm', upstream: upstream.url, provider: 'openai' },
      // Nothing listens on port 1: a connect error, answered by the proxy itself.
      { prefix: '/down', upstream: 'http://127.0.0.1:1', provider: 'openai' },
    ],
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { app, upstream, hooks, base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` }
}

t.test('a CORS preflight to a proxied route is answered by the app’s @fastify/cors, never by the upstream', async (t) => {
  const { upstream, base } = await setup(t)
  const { res } = await openRequest(`${base}/llm/v1/chat/completions`, {
    method: 'OPTIONS',
    headers: { origin: ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, authorization' },
  })
  await readAll(res)
  t.equal(res.statusCode, 204)
  t.same(values(res.rawHeaders, 'access-control-allow-origin'), [ORIGIN])
  t.match(res.headers['access-control-allow-methods'], /POST/)
  t.equal(res.headers['access-control-allow-headers'], 'content-type, authorization')
  t.equal(upstream.requests.length, 0, 'the preflight never reached the upstream')
})

t.test('a streamed answer carries the app’s CORS and rate-limit headers, its bytes unchanged and its tokens counted', async (t) => {
  const { app, upstream, hooks, base } = await setup(t)
  const { res } = await openRequest(`${base}/llm/v1/chat/completions`, { headers: { origin: ORIGIN, 'content-type': 'application/json' }, body: BODY })
  const body = await readAll(res)
  t.equal(res.statusCode, 200)
  t.equal(body.toString('latin1'), Buffer.from(SSE).toString('latin1'), 'the stream arrives byte for byte')
  t.equal(upstream.requests[0].body.toString(), BODY, 'the request body went upstream unchanged')
  t.same(values(res.rawHeaders, 'access-control-allow-origin'), [ORIGIN], "one CORS policy, the app's (the upstream's `*` is replaced)")
  t.equal(res.headers['access-control-allow-credentials'], 'true')
  t.equal(res.headers['x-ratelimit-limit'], '5')
  t.equal(res.headers['x-ratelimit-remaining'], '4')
  t.ok(res.headers['x-ratelimit-reset'] !== undefined)
  t.equal(res.headers['x-ratelimit-limit-requests'], '10000', "the provider's own limits are kept")
  t.equal(res.headers['x-app'], 'yes', 'a header only the app set is added')
  t.same(values(res.rawHeaders, 'x-served-by'), ['upstream'], 'a header both set: the upstream’s is kept')
  t.same(values(res.rawHeaders, 'content-type'), ['text/event-stream'], 'the body’s type is the upstream’s')
  t.same(values(res.rawHeaders, 'vary').sort(), ['Accept-Encoding', 'Origin'], 'vary: both kept')

  await new Promise<void>((resolve) => setImmediate(resolve))
  const m = parseMetrics(await app.tokentap.registry.text())
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/llm' }
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), 1)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 2, 'counts exact')
  t.equal(sumOf(m, 'llm_input_tokens_total', labels), 7)
  t.equal(hooks.onSend, 0, 'onSend never runs for a proxied route: the reply is hijacked')
  t.same(hooks.onResponse, [200], 'onResponse runs once the answer finished')
})

t.test('the proxy’s own error answer (upstream unreachable) carries the app’s CORS headers, so a browser app can read it', async (t) => {
  const { base } = await setup(t)
  const { res } = await openRequest(`${base}/down/v1/chat/completions`, { headers: { origin: ORIGIN, 'content-type': 'application/json' }, body: BODY })
  const body = JSON.parse((await readAll(res)).toString()) as { error: { code: string } }
  t.equal(res.statusCode, 502)
  t.equal(body.error.code, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  t.same(values(res.rawHeaders, 'access-control-allow-origin'), [ORIGIN])
  t.same(values(res.rawHeaders, 'content-type'), ['application/json'])
  t.equal(res.headers['x-ratelimit-limit'], '5')
})

t.test('onRequestAbort runs when the client leaves while still sending its body, and the request is counted as cancelled', async (t) => {
  let arrived: () => void = () => undefined
  const atUpstream = new Promise<void>((resolve) => {
    arrived = resolve
  })
  // Raw: called with the head, the body left unread (it never ends).
  const upstream = await startUpstream(() => arrived(), { raw: true })
  t.teardown(() => upstream.close())
  const app = Fastify({ loggerInstance: pino({ level: 'silent' }) })
  const aborted = new Promise<string>((resolve) => {
    app.addHook('onRequestAbort', async (request) => resolve(request.url))
  })
  await app.register(tokentap, { routes: [{ prefix: '/llm', upstream: upstream.url, provider: 'openai' }] })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  // A chunked body, its first piece sent and the rest never.
  const req = request(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/llm/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    agent: false,
  })
  req.on('error', () => undefined)
  req.write('{"model":"gpt-4o-mini",')
  await atUpstream
  req.destroy()
  t.equal(await aborted, '/llm/v1/chat/completions', 'the hook saw the proxied request')
  while (app.tokentap.active.size > 0) await new Promise((resolve) => setImmediate(resolve))
  const m = parseMetrics(await app.tokentap.registry.text())
  t.equal(sumOf(m, 'llm_requests_total', { route: '/llm', outcome: 'cancelled' }), 1)
})
