import t from 'tap'
import { gzipSync, brotliCompressSync } from 'node:zlib'
import { startProxy } from '../helpers/proxy.ts'
import { replay, sseEvents, startUpstream } from '../helpers/upstream.ts'
import type { TestUpstream } from '../helpers/upstream.ts'
import { endToEndHeaders, rawRequest } from '../helpers/http.ts'
import { fixture } from '../helpers/fixtures.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { defined } from '../helpers/defined.ts'

const STREAM = fixture('openai/chat-text-role-first-usage-chunk.sse')
const EVENTS = sseEvents(STREAM.toString('utf8'))

/** An upstream that answers by path, like a provider would. */
async function provider(): Promise<TestUpstream> {
  return startUpstream(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    switch (url.pathname) {
      case '/api/v1/chat/completions': {
        res.writeHead(200, ['Content-Type', 'text/event-stream; charset=utf-8', 'Set-Cookie', 'a=1; Path=/', 'Set-Cookie', 'b=2; Path=/', 'X-Request-Id', 'req-123', 'openai-processing-ms', '42'])
        await replay(
          res,
          EVENTS.map((e) => ({ afterMs: 5, bytes: e })),
        )
        return
      }
      case '/api/v1/gzip': {
        const body = gzipSync(STREAM)
        res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' })
        // Compressed bytes arrive in several reads; the proxy inflates a copy per read.
        await replay(
          res,
          [0, 1, 2, 3].map((i) => ({ afterMs: 5, bytes: body.subarray((i * body.length) / 4, ((i + 1) * body.length) / 4) })),
        )
        return
      }
      case '/api/v1/br': {
        const body = brotliCompressSync(STREAM)
        res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'br' })
        res.end(body)
        return
      }
      case '/api/v1/json': {
        const body = JSON.stringify({ id: 'x', object: 'chat.completion', model: 'gpt-4o-2024-08-06', choices: [], usage: { prompt_tokens: 11, completion_tokens: 7 } })
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
        res.end(body)
        return
      }
      case '/api/v1/teapot': {
        res.writeHead(429, 'Too Many Requests', { 'content-type': 'application/json', 'retry-after': '3' })
        res.end('{"error":{"message":"slow down","type":"rate_limit"}}')
        return
      }
      case '/api/v1/boom': {
        res.writeHead(503, { 'content-type': 'text/plain' })
        res.end('upstream unavailable')
        return
      }
      default:
        res.writeHead(404, { 'content-type': 'application/json' })
        res.end('{"error":"not found"}')
    }
  })
}

t.test('responses reach the client byte for byte: status, headers, body', async (t) => {
  const up = await provider()
  t.teardown(() => up.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: `${up.url}/api` }] })
  t.teardown(() => proxy.close())
  const post = { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-x' }, body: '{"model":"gpt-4o","stream":true}' }
  for (const path of ['/v1/chat/completions', '/v1/gzip', '/v1/br', '/v1/json', '/v1/teapot', '/v1/boom', '/v1/nothing?x=1']) {
    const direct = await rawRequest(`${up.url}/api${path}`, post)
    const proxied = await rawRequest(`${proxy.url}/openai${path}`, post)
    t.equal(proxied.status, direct.status, `${path}: status`)
    t.equal(proxied.statusMessage, direct.statusMessage, `${path}: reason phrase`)
    t.same(endToEndHeaders(proxied.rawHeaders), endToEndHeaders(direct.rawHeaders), `${path}: headers, in order, duplicates kept`)
    t.ok(proxied.body.equals(direct.body), `${path}: body bytes identical (${direct.body.length} bytes)`)
  }
  const sse = await rawRequest(`${proxy.url}/openai/v1/chat/completions`, post)
  t.same(
    endToEndHeaders(sse.rawHeaders).filter(([n]) => n === 'set-cookie'),
    [
      ['set-cookie', 'a=1; Path=/'],
      ['set-cookie', 'b=2; Path=/'],
    ],
    'several set-cookie headers stay separate',
  )
})

t.test('compressed streams pass untouched and are still measured on a decoded copy', async (t) => {
  const up = await provider()
  t.teardown(() => up.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: `${up.url}/api`, provider: 'openai' }] })
  t.teardown(() => proxy.close())
  for (const path of ['/v1/gzip', '/v1/br']) {
    const r = await rawRequest(`${proxy.url}/openai${path}`, { method: 'POST', body: '{"model":"gpt-4o-mini"}' })
    t.equal(r.status, 200)
  }
  await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  // The recording has 8 single-token content chunks and reports completion_tokens 9.
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { model: 'gpt-4o-mini' }), 2, 'TTFT measured through gzip and br')
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', { model: 'gpt-4o-mini' }), 2 * 7, '7 gaps per stream')
  t.equal(sumOf(m, 'llm_output_tokens_total', { model: 'gpt-4o-mini', source: 'usage' }), 18, 'usage read from the decoded copy')
})

t.test('the request reaches the upstream intact: method, path, query, headers, body', async (t) => {
  const up = await provider()
  t.teardown(() => up.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: `${up.url}/api` }] })
  t.teardown(() => proxy.close())
  const body = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'héllo' }] })
  await rawRequest(`${proxy.url}/openai/v1/json?api-version=2024-10-21&x=%2F`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-live',
      'OpenAI-Organization': 'org-1',
      'x-custom': ['a', 'b'],
      connection: 'keep-alive, x-hop',
      'x-hop': 'secret',
      'keep-alive': 'timeout=5',
    },
    body,
  })
  const seen = defined(up.requests.at(-1), 'a request upstream')
  t.equal(seen.method, 'POST')
  t.equal(seen.url, '/api/v1/json?api-version=2024-10-21&x=%2F', 'prefix replaced by the upstream base path, query kept byte for byte')
  t.equal(seen.body.toString('utf8'), body)
  const h = endToEndHeaders(seen.rawHeaders)
  const get = (n: string) => h.filter(([k]) => k === n).map(([, v]) => v)
  t.same(get('authorization'), ['Bearer sk-live'], 'authorization forwarded')
  t.same(get('openai-organization'), ['org-1'])
  t.same(get('x-custom'), ['a', 'b'], 'repeated headers kept')
  t.same(get('x-hop'), [], 'a header named by Connection does not cross (RFC 9110 §7.6.1)')
  t.same(get('keep-alive'), [], 'Keep-Alive does not cross')
  t.same(get('host'), [new URL(up.url).host], 'Host names the upstream')
})

t.test('every request is counted, also errors and requests that are not completions', async (t) => {
  const up = await provider()
  t.teardown(() => up.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: `${up.url}/api`, name: 'oai', provider: 'openai' }] })
  t.teardown(() => proxy.close())
  await rawRequest(`${proxy.url}/openai/v1/teapot`, { method: 'POST', body: '{"model":"gpt-4o"}' })
  await rawRequest(`${proxy.url}/openai/v1/boom`)
  await rawRequest(`${proxy.url}/openai/v1/models`)
  await rawRequest(`${proxy.url}/openai/v1/json`, { method: 'POST', body: '{"model":"gpt-4o"}' })
  await proxy.waitForRequests(4)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { route: 'oai', outcome: 'error', status_code: '429', model: 'gpt-4o' }), 1, '429 is an error, with its status')
  t.equal(sumOf(m, 'llm_requests_total', { route: 'oai', outcome: 'error', status_code: '503', model: 'unknown' }), 1)
  t.equal(sumOf(m, 'llm_requests_total', { route: 'oai', outcome: 'error', status_code: '404' }), 1, 'a 404 for GET /v1/models is counted')
  t.equal(sumOf(m, 'llm_requests_total', { route: 'oai', outcome: 'ok', status_code: '200' }), 1)
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { route: 'oai' }), 4, 'E2E for every request')
  t.equal(sumOf(m, 'llm_input_tokens_total', { route: 'oai', model: 'gpt-4o' }), 11, 'a whole answer reports its input tokens')
  t.equal(sumOf(m, 'llm_output_tokens_total', { route: 'oai', model: 'gpt-4o', source: 'usage' }), 7)
})

t.test('a route path outside every prefix is not proxied', async (t) => {
  const up = await provider()
  t.teardown(() => up.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: `${up.url}/api` }] })
  t.teardown(() => proxy.close())
  const r = await rawRequest(`${proxy.url}/openaix/v1/json`)
  t.equal(r.status, 404)
  t.equal(up.requests.length, 0)
})
