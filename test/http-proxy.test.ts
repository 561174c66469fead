import { request } from 'node:http'
import type { IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import Fastify from 'fastify'
import httpProxy from '@fastify/http-proxy'
import OpenAI from 'openai'
import pino from 'pino'
import t from 'tap'
import type { Test } from 'tap'
import tokentap from '../src/plugin.ts'
import { tokentapReplyOptions } from '../src/http-proxy.ts'
import { validateConfig } from '../src/config/load-config.ts'
import { buildSimulator } from '../src/sim/sim-app.ts'
import { simPlan } from './helpers/proxy.ts'
import { startUpstream } from './helpers/upstream.ts'
import { parseMetrics, sumOf } from './helpers/prometheus.ts'
import { defined } from './helpers/defined.ts'
import { openRequest, readAll } from './helpers/http.ts'

const SIM = defined(validateConfig({ routes: [{ prefix: '/s', simulator: { jitter_ms: 0, stall_probability: 0, burst_every: 0 } }] }).routes[0].simulator, 'a simulator config')
const FIRST = 2
const GAPS: [number, number][] = [
  [5, 1],
  [5, 3],
  [5, 1],
]
const N = FIRST + GAPS.reduce((n, [, k]) => n + k, 0)

async function setup(t: Test) {
  const sim = buildSimulator(SIM)
  await sim.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => sim.close())
  const app = Fastify({ loggerInstance: pino({ level: 'silent' }) })
  await app.register(tokentap, { routes: [] })
  await app.register(httpProxy, {
    prefix: '/openai',
    upstream: `http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`,
    replyOptions: tokentapReplyOptions(app, { prefix: '/openai', provider: 'openai' }),
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const settled = async (): Promise<void> => {
    while (app.tokentap.active.size > 0) await new Promise((r) => setTimeout(r, 5))
  }
  return { app, sim, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, settled }
}

t.test('an @fastify/http-proxy registration with tokentapReplyOptions is measured like a tokentap route', async (t) => {
  const { app, url, settled } = await setup(t)
  const client = new OpenAI({ baseURL: `${url}/openai/v1`, apiKey: 'sk-test' })
  const stream = await client.chat.completions.create(
    { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'count' }], stream: true, stream_options: { include_usage: true } },
    simPlan({ ttft_ms: 5, first_tokens: FIRST, chunks: GAPS }),
  )
  let text = ''
  let usage: number | undefined
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? ''
    if (chunk.usage) usage = chunk.usage.completion_tokens
  }
  t.equal(text.split(' ').length - 1, N, 'every token reached the SDK')
  t.equal(usage, N)
  await settled()
  const m = parseMetrics(await app.tokentap.registry.text())
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/openai' }
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), 1)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), N - FIRST, 'ITL count = N − k_1')
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), GAPS.length)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), N)
  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_client_write_wait_seconds_count', labels), 0, "no client write wait: @fastify/http-proxy's reply writes the bytes, unwatched")
})

t.test('the bytes through @fastify/http-proxy are the upstream bytes, unchanged', async (t) => {
  const sse = `${[1, 2, 3].map((i) => `data: {"choices":[{"index":0,"delta":{"content":"w${i} \\u00e9"}}]}\r\n\r\n`).join(': keep-alive\r\n\r\n')}data: [DONE]\r\n\r\n`
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-upstream': 'yes' })
    res.end(sse)
  })
  t.teardown(() => upstream.close())
  const app = Fastify({ loggerInstance: pino({ level: 'silent' }) })
  await app.register(tokentap, { routes: [] })
  await app.register(httpProxy, { prefix: '/p', upstream: upstream.url, replyOptions: tokentapReplyOptions(app, { prefix: '/p', provider: 'openai' }) })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const res = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/p/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"model":"m","stream":true}',
  })
  t.equal(res.headers.get('x-upstream'), 'yes')
  t.equal(Buffer.from(await res.arrayBuffer()).toString('latin1'), Buffer.from(sse).toString('latin1'), 'byte for byte, comments and CRLFs included')
  t.equal(upstream.requests[0].url, '/v1/chat/completions')
})

t.test('a client that leaves an @fastify/http-proxy stream is recorded as cancelled, and the upstream request is closed too', async (t) => {
  const { app, sim, url, settled } = await setup(t)
  // The simulator's answer, closed before its end or not (the last chunk is a minute away).
  const upstreamClosed = new Promise<boolean>((resolve) => sim.server.once('request', (_req, res) => res.once('close', () => resolve(!res.writableFinished))))
  const ac = new AbortController()
  const res = await fetch(`${url}/openai/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { 'content-type': 'application/json', ...simPlan({ ttft_ms: 1, first_tokens: 1, chunks: [[60_000, 1]] }).headers },
    body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [] }),
  })
  const reader = defined(res.body, 'a response body').getReader()
  await reader.read()
  ac.abort()
  await reader.cancel().catch(() => {})
  await settled()
  const m = parseMetrics(await app.tokentap.registry.text())
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'cancelled', status_code: '200' }), 1)
  t.equal(sumOf(m, 'llm_requests_in_flight'), 0)
  // As reply-from does without the tap: the upstream answer is dropped, not read to its end.
  const closed = await Promise.race([upstreamClosed, new Promise<string>((r) => setTimeout(r, 10_000, 'still open after 10 s').unref())])
  t.equal(closed, true, 'the upstream answer closed before its end')
})

t.test("the helper's log line reports the request's real bytes_in, a chunked upload included", async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"choices":[]}')
  })
  t.teardown(() => upstream.close())
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>)
      cb()
    },
  })
  const app = Fastify({ loggerInstance: pino({ level: 'silent' }) })
  await app.register(tokentap, { routes: [], logger: pino({ level: 'info', base: undefined }, sink) })
  await app.register(httpProxy, { prefix: '/p', upstream: upstream.url, replyOptions: tokentapReplyOptions(app, { prefix: '/p', provider: 'openai' }) })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/p/v1/chat/completions`
  const fixed = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(70_000) }] })
  await readAll((await openRequest(url, { headers: { 'content-type': 'application/json' }, body: fixed })).res)
  // No Content-Length: node:http sends the pieces chunked.
  const pieces = ['{"model":"m",', '"messages":[]', '}']
  const chunked = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, agent: false }, resolve)
    req.on('error', reject)
    for (const p of pieces) req.write(p)
    req.end()
  })
  await readAll(chunked)
  while (lines.filter((l) => l.msg === 'request').length < 2) await new Promise((r) => setImmediate(r))
  const logged = lines.filter((l) => l.msg === 'request').map((l) => l.bytes_in)
  t.same(logged, [Buffer.byteLength(fixed), pieces.join('').length])
  t.same(
    upstream.requests.map((r) => r.body.toString()),
    [fixed, pieces.join('')],
    'the upstream got every byte: counting took none away',
  )
})
