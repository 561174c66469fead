import t from 'tap'
import type { Test } from 'tap'
import { createServer as createHttpsServer } from 'node:https'
import { createServer as createNetServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import type { TLSSocket } from 'node:tls'
import { startProxy, simRoute } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { endToEndHeaders, rawRequest } from '../helpers/http.ts'
import { replay, sseEvents, startUpstream } from '../helpers/upstream.ts'
import type { TestUpstream } from '../helpers/upstream.ts'
import { fixture } from '../helpers/fixtures.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { startTinyproxy } from '../helpers/tinyproxy.ts'
import { makeTestCa } from '../helpers/test-ca.ts'
import { startRawUpstream } from '../helpers/raw-socket.ts'

// Egress as companies run it: every upstream reached through a corporate forward proxy, here
// Debian's tinyproxy on loopback. The proxy only relays a CONNECT tunnel, so the client must get
// the very bytes, and the metrics the very counts and gaps, of a direct connection.

const STREAM = fixture('openai/chat-text-role-first-usage-chunk.sse')
const EVENTS = sseEvents(STREAM.toString('utf8'))
const GAP_MS = 20
const BODY = '{"model":"gpt-4o-mini","stream":true}'
const post = { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-x', 'x-custom': ['a', 'b'] }, body: BODY }

/** An upstream that streams the recorded chat completion, each event GAP_MS after the one before. */
async function chatUpstream(t: Test): Promise<TestUpstream> {
  const up = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    void replay(
      res,
      EVENTS.map((e) => ({ afterMs: GAP_MS, bytes: e })),
      { relative: true },
    )
  })
  t.teardown(() => up.close())
  return up
}

const port = (url: string): string => new URL(url).port

/** Every figure of one recorded stream, as on a direct connection (the recording: 8 one-token chunks, usage 9). */
async function checkStream(t: Test, proxy: RunningProxy, route: string): Promise<void> {
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { route, model: 'gpt-4o-mini' }
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), 7, 'one gap per content chunk after the first')
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 9)
  // Event i (the role chunk is 0, the content chunks 1 to 8) is written at least (i + 1) × GAP_MS
  // after t_req, and never reaches the proxy earlier, so t_last − t_first ≥ 9 × GAP_MS − TTFT;
  // and t_last − t_first ≤ E2E − TTFT. (Consecutive gaps can shrink on a loaded machine.)
  const gaps = sumOf(m, 'llm_inter_chunk_latency_seconds_sum', labels)
  const ttft = sumOf(m, 'llm_time_to_first_token_seconds_sum', labels)
  const e2e = sumOf(m, 'llm_request_duration_seconds_sum', labels)
  const low = (9 * GAP_MS) / 1000 - ttft
  t.ok(gaps > 0 && gaps >= low - 1e-6 && gaps <= e2e - ttft + 1e-6, `inter-chunk sum ${gaps} s within [${low}, ${e2e - ttft}]`)
}

t.test('a route with proxy: reaches its upstream through the forward proxy with the same bytes, headers and timing', async (t) => {
  const tiny = await startTinyproxy(t)
  if (tiny === undefined) return
  const up = await chatUpstream(t)
  const proxy = await startProxy({ routes: [{ prefix: '/openai', name: 'oai', upstream: up.url, provider: 'openai', proxy: tiny.url }] })
  t.teardown(() => proxy.close())
  const direct = await rawRequest(`${up.url}/v1/chat/completions`, post)
  const proxied = await rawRequest(`${proxy.url}/openai/v1/chat/completions`, { ...post, headers: { ...post.headers, 'proxy-authorization': 'Basic Y2xpZW50OnNlY3JldA==' } })
  t.equal(proxied.status, 200)
  t.ok(proxied.body.equals(direct.body) && proxied.body.equals(STREAM), 'the client got the recorded bytes exactly')
  t.same(endToEndHeaders(proxied.rawHeaders), endToEndHeaders(direct.rawHeaders), 'response headers as sent')
  t.same(tiny.connects(), [`127.0.0.1:${port(up.url)}`], 'one CONNECT tunnel to the upstream')
  const seen = endToEndHeaders(up.requests[1].rawHeaders)
  t.same(
    seen.filter(([n]) => n === 'x-custom').map(([, v]) => v),
    ['a', 'b'],
    'repeated request headers arrive, each value unchanged',
  )
  t.same(
    seen.filter(([n]) => n === 'authorization').map(([, v]) => v),
    ['Bearer sk-x'],
  )
  t.same(
    seen.filter(([n]) => n === 'proxy-authorization'),
    [],
    "the client's Proxy-Authorization is not sent to the upstream",
  )
  t.equal(up.requests[1].body.toString('utf8'), BODY)
  await checkStream(t, proxy, 'oai')
})

t.test('HTTP_PROXY from the environment applies to every route, NO_PROXY exempts hosts, and the simulator is never proxied', async (t) => {
  const tiny = await startTinyproxy(t)
  if (tiny === undefined) return
  const up = await chatUpstream(t)
  const start = async (env: Record<string, string>): Promise<RunningProxy> => {
    // The environment is read once, when the app is built.
    const saved = { ...process.env }
    Object.assign(process.env, env)
    try {
      const proxy = await startProxy({ routes: [{ prefix: '/openai', name: 'oai', upstream: up.url, provider: 'openai' }, simRoute('/sim', { ttft_ms: 0, itl_ms: 0, tokens: 3 })] })
      t.teardown(() => proxy.close())
      return proxy
    } finally {
      for (const k of Object.keys(env))
        if (saved[k] === undefined) delete process.env[k]
        else process.env[k] = saved[k]
    }
  }
  const proxied = await start({ HTTP_PROXY: tiny.url, HTTPS_PROXY: tiny.url })
  const r = await rawRequest(`${proxied.url}/openai/v1/chat/completions`, post)
  t.ok(r.body.equals(STREAM), 'the recorded bytes through the proxy')
  const sim = await rawRequest(`${proxied.url}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"model":"m","messages":[{"role":"user","content":"hi"}]}',
  })
  t.equal(sim.status, 200, 'the simulator answers')
  t.same(tiny.connects(), [`127.0.0.1:${port(up.url)}`], 'the upstream through a CONNECT tunnel, the simulator directly')
  await checkStream(t, proxied, 'oai')

  const exempt = await start({ HTTP_PROXY: tiny.url, NO_PROXY: 'localhost,127.0.0.1' })
  t.equal((await rawRequest(`${exempt.url}/openai/v1/chat/completions`, post)).status, 200)
  t.equal(tiny.connects().length, 1, 'NO_PROXY: no new tunnel')
  t.equal(up.requests.length, 2)
})

t.test('mTLS to an https upstream through the forward proxy: TLS inside the tunnel, with the route CA and client certificate', async (t) => {
  const tiny = await startTinyproxy(t)
  if (tiny === undefined) return
  const ca = makeTestCa()
  t.teardown(() => ca.remove())
  const clients: unknown[] = []
  const server = createHttpsServer({ key: ca.read(ca.serverKey), cert: ca.read(ca.serverCert), ca: ca.read(ca.caCert), requestCert: true, rejectUnauthorized: true }, (req, res) => {
    clients.push((req.socket as TLSSocket).getPeerCertificate().subject?.CN)
    req.resume()
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    void replay(
      res,
      EVENTS.map((e) => ({ afterMs: GAP_MS, bytes: e })),
      { relative: true },
    )
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  const upstream = `https://127.0.0.1:${(server.address() as AddressInfo).port}`
  const proxy = await startProxy({
    routes: [{ prefix: '/llm', name: 'llm', upstream, provider: 'openai', proxy: tiny.url, tls: { ca: ca.caCert, cert: ca.clientCert, key: ca.clientKey, servername: 'upstream.test' } }],
  })
  t.teardown(() => proxy.close())
  const r = await rawRequest(`${proxy.url}/llm/v1/chat/completions`, post)
  t.equal(r.status, 200)
  t.ok(r.body.equals(STREAM), 'the recorded bytes')
  t.same(clients, ['tokentap-client'], 'the upstream saw the client certificate')
  t.same(tiny.connects(), [`127.0.0.1:${port(upstream)}`])
  await checkStream(t, proxy, 'llm')
})

t.test('a forward proxy that cannot be reached gives the client a 502 and the request is counted', async (t) => {
  const up = await chatUpstream(t)
  const proxy = await startProxy({ routes: [{ prefix: '/openai', name: 'oai', upstream: up.url, proxy: 'http://127.0.0.1:1' }] })
  t.teardown(() => proxy.close())
  const r = await rawRequest(`${proxy.url}/openai/v1/chat/completions`, post)
  t.equal(r.status, 502)
  t.match(JSON.parse(r.body.toString('utf8')), { error: { code: 'TOKENTAP_ERR_UPSTREAM_CONNECT' } })
  t.equal(up.requests.length, 0)
  await proxy.waitForRequests(1)
  t.equal(sumOf(await proxy.scrape(), 'llm_requests_total', { route: 'oai', outcome: 'error', status_code: '502' }), 1)
})

t.test('through the forward proxy too, an upstream’s unsolicited 100 Continue is skipped and the final answer measured', async (t) => {
  const tiny = await startTinyproxy(t)
  if (tiny === undefined) return
  const body = `${EVENTS.join('')}`
  const upstream = await startRawUpstream((socket) => {
    socket.write(`HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/openai', name: 'oai', upstream: upstream.url, provider: 'openai', proxy: tiny.url }] })
  t.teardown(() => proxy.close())
  const res = await rawRequest(`${proxy.url}/openai/v1/chat/completions`, post)
  t.equal(res.status, 200)
  t.ok(res.body.equals(STREAM), 'the recorded bytes, no 100')
  t.same(tiny.connects(), [`127.0.0.1:${port(upstream.url)}`], 'through one CONNECT tunnel')
  const [line] = await proxy.waitForRequests(1)
  t.same([line.outcome, line.status, line.output_tokens], ['ok', 200, 9])
})

t.test('through the forward proxy, an https upstream that never completes the TLS handshake is cut at the connect timeout: 502, the connect code', async (t) => {
  const tiny = await startTinyproxy(t)
  if (tiny === undefined) return
  const silent = createNetServer((socket) => {
    socket.on('error', () => {})
    socket.resume()
  })
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => silent.close(() => r())))
  const url = `https://127.0.0.1:${(silent.address() as AddressInfo).port}`
  const proxy = await startProxy({ routes: [{ prefix: '/openai', upstream: url, provider: 'openai', proxy: tiny.url }], upstream: { connect_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  const res = await rawRequest(`${proxy.url}/openai/v1/chat/completions`, post)
  t.equal(res.status, 502)
  t.equal((JSON.parse(res.body.toString('utf8')) as { error: { code: string } }).error.code, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  const [line] = await proxy.waitForRequests(1)
  t.same([line.outcome, line.status], ['error', 502])
})
