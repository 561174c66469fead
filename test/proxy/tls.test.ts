import t from 'tap'
import type { Test } from 'tap'
import { createServer as createHttpsServer, request as httpsRequest } from 'node:https'
import type { Server } from 'node:https'
import type { AddressInfo } from 'node:net'
import type { TLSSocket } from 'node:tls'
import { startProxy } from '../helpers/proxy.ts'
import { rawRequest } from '../helpers/http.ts'
import { replay, sseEvents, startUpstream } from '../helpers/upstream.ts'
import { fixture } from '../helpers/fixtures.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import { makeTestCa } from '../helpers/test-ca.ts'
import { buildApp } from '../../src/app.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import pino from 'pino'

// TLS as companies run it: a self-hosted model server behind its own CA that wants a client
// certificate (mTLS), and tokentap's own listeners on TLS. A throw-away CA is made with openssl.

const ca = makeTestCa()
t.teardown(() => ca.remove())

const STREAM = fixture('openai/chat-text-role-first-usage-chunk.sse')
const EVENTS = sseEvents(STREAM.toString('utf8'))
const BODY = '{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}'

interface SeenTls {
  servername: string | false | null | undefined
  clientCn: unknown
}

/** An HTTPS model server that wants a client certificate signed by the test CA; streams the recorded chat. */
async function mtlsUpstream(t: Test): Promise<{ url: string; seen: SeenTls[]; server: Server }> {
  const seen: SeenTls[] = []
  const server = createHttpsServer({ key: ca.read(ca.serverKey), cert: ca.read(ca.serverCert), ca: ca.read(ca.caCert), requestCert: true, rejectUnauthorized: true }, (req, res) => {
    const socket = req.socket as TLSSocket
    seen.push({ servername: socket.servername, clientCn: socket.getPeerCertificate().subject?.CN })
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      void replay(
        res,
        EVENTS.map((e) => ({ afterMs: 5, bytes: e })),
      )
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server }
}

const post = { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-x' }, body: BODY }

t.test('mTLS to a self-hosted model server: its CA, a client certificate and the SNI name; bytes and metrics as on plain HTTP', async (t) => {
  const up = await mtlsUpstream(t)
  const proxy = await startProxy({
    routes: [{ prefix: '/llm', name: 'llm', upstream: up.url, provider: 'openai', tls: { ca: ca.caCert, cert: ca.clientCert, key: ca.clientKey, servername: 'upstream.test' } }],
  })
  t.teardown(() => proxy.close())
  const r = await rawRequest(`${proxy.url}/llm/v1/chat/completions`, post)
  t.equal(r.status, 200)
  t.ok(r.body.equals(STREAM), 'the client got the recorded bytes exactly')
  t.same(up.seen, [{ servername: 'upstream.test', clientCn: 'tokentap-client' }], 'the upstream saw the SNI name and the client certificate')
  await proxy.waitForRequests(1)
  const m = await proxy.scrape()
  const labels = { route: 'llm', model: 'gpt-4o-mini' }
  // The recording: 8 single-token content chunks, usage 9.
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), 1)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), 7)
  t.equal(sumOf(m, 'llm_output_tokens_total', { ...labels, source: 'usage' }), 9)
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), 1)
})

t.test('without the client certificate, or without the CA, the handshake fails and the client gets a 502', async (t) => {
  const up = await mtlsUpstream(t)
  const proxy = await startProxy({
    routes: [
      { prefix: '/nocert', upstream: up.url, tls: { ca: ca.caCert, servername: 'upstream.test' } },
      { prefix: '/noca', upstream: up.url, tls: { cert: ca.clientCert, key: ca.clientKey } },
      { prefix: '/plain', upstream: up.url },
    ],
  })
  t.teardown(() => proxy.close())
  for (const prefix of ['/nocert', '/noca', '/plain']) {
    const r = await rawRequest(`${proxy.url}${prefix}/v1/chat/completions`, post)
    t.equal(r.status, 502, `${prefix}: 502`)
    t.match(JSON.parse(r.body.toString('utf8')), { error: { type: 'proxy_error', code: /^TOKENTAP_ERR_UPSTREAM_/ } }, `${prefix}: a proxy error`)
  }
  t.same(up.seen, [], 'no request reached the model server')
  await proxy.waitForRequests(3)
  t.equal(sumOf(await proxy.scrape(), 'llm_requests_total', { outcome: 'error', status_code: '502' }), 3)
})

/** An HTTPS request that trusts the test CA; resolves with status and body. */
function tlsRequest(url: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method: opts.method ?? 'GET', headers: opts.headers, ca: ca.read(ca.caCert), agent: false }, (res) => {
      const parts: Buffer[] = []
      res.on('data', (c: Buffer) => parts.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts) }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(opts.body)
  })
}

t.test('server.tls and admin.tls: the proxy and admin listeners speak TLS with the given certificate', async (t) => {
  const up = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    void replay(
      res,
      EVENTS.map((e) => ({ afterMs: 5, bytes: e })),
    )
  })
  t.teardown(() => up.close())
  const listenerTls = { cert: ca.serverCert, key: ca.serverKey }
  const config = validateConfig({
    server: { host: '127.0.0.1', port: 0, tls: listenerTls },
    admin: { host: '127.0.0.1', port: 0, tls: listenerTls },
    log: { level: 'silent' },
    routes: [{ prefix: '/openai', name: 'oai', upstream: up.url }],
  })
  const app = await buildApp(config, { logger: pino({ level: 'silent' }) })
  t.teardown(async () => {
    app.server.closeAllConnections()
    await app.close()
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  await app.tokentap.admin.listen({ host: '127.0.0.1', port: 0 })
  const port = (s: { address(): unknown }): number => (s.address() as AddressInfo).port
  const r = await tlsRequest(`https://localhost:${port(app.server)}/openai/v1/chat/completions`, post)
  t.equal(r.status, 200)
  t.ok(r.body.equals(STREAM), 'the recorded bytes, over TLS')
  await t.rejects(rawRequest(`http://127.0.0.1:${port(app.server)}/openai/v1/models`), 'plain HTTP is not served on the TLS port')
  const admin = `https://localhost:${port(app.tokentap.admin.server)}`
  t.equal((await tlsRequest(`${admin}/healthz`)).status, 200)
  // Requests are recorded on the response's close: wait for it before the scrape.
  let m = parseMetrics((await tlsRequest(`${admin}/metrics`)).body.toString('utf8'))
  for (let i = 0; i < 200 && sumOf(m, 'llm_requests_total', { route: 'oai' }) < 1; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10))
    m = parseMetrics((await tlsRequest(`${admin}/metrics`)).body.toString('utf8'))
  }
  t.equal(sumOf(m, 'llm_requests_total', { route: 'oai', outcome: 'ok' }), 1)
  t.equal(sumOf(m, 'llm_output_tokens_total', { route: 'oai', source: 'usage' }), 9)
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', { route: 'oai' }), 7)
})

t.test('TLS settings are checked at start-up: a certificate needs its key, and an unreadable file names its key', async (t) => {
  t.throws(() => validateConfig({ routes: [{ prefix: '/a', upstream: 'https://x', tls: { cert: ca.clientCert } }] }), /routes\[0\]\.tls/)
  t.throws(() => validateConfig({ server: { tls: { cert: ca.serverCert } }, routes: [{ prefix: '/a', upstream: 'https://x' }] }), /server\.tls\.key' is required/)
  t.throws(() => validateConfig({ routes: [{ prefix: '/a', upstream: 'https://x', tls: {} }] }), /routes\[0\]\.tls/)
  t.throws(() => validateConfig({ routes: [{ prefix: '/a', upstream: 'https://x', proxy: 'socks5://p:1080' }] }), /routes\[0\]\.proxy' has the wrong form/)
  const missing = validateConfig({ log: { level: 'silent' }, routes: [{ prefix: '/a', upstream: 'https://x', tls: { ca: '/nonexistent/ca.pem' } }] })
  await t.rejects(buildApp(missing, { logger: pino({ level: 'silent' }) }), { code: 'TOKENTAP_ERR_CONFIG_INVALID', message: /'routes\[0\]\.tls\.ca' cannot be read: ENOENT/ })
  const noKey = validateConfig({ log: { level: 'silent' }, admin: { tls: { cert: ca.serverCert, key: '/nonexistent/key.pem' } }, routes: [{ prefix: '/a', upstream: 'https://x' }] })
  await t.rejects(buildApp(noKey, { logger: pino({ level: 'silent' }) }), { code: 'TOKENTAP_ERR_CONFIG_INVALID', message: /'admin\.tls\.key' cannot be read/ })
})
