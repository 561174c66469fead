import { connect } from 'node:net'
import t from 'tap'
import type { SessionSummary } from '../../src/realtime/session.ts'
import type { FinishedResponse } from '../../src/realtime/protocol.ts'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { eventually, startWsUpstream, tapedClient } from '../helpers/realtime.ts'
import { rawExchange } from '../helpers/raw-socket.ts'

/** A proxy with one route to `upstream`, whose finished sessions and responses the test sees. */
async function proxyTo(upstream: string, route: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
  const proxy = await startProxy({ routes: [{ prefix: '/rt', upstream, provider: 'openai', ...route }], ...extra })
  const sessions: SessionSummary[] = []
  const responses: FinishedResponse[] = []
  proxy.app.tokentap.realtime.listen({ session: (_w, _l, s) => sessions.push(s), response: (_w, _l, r) => responses.push(r) })
  return { proxy, sessions, responses, ws: (path: string) => `${proxy.url.replace('http', 'ws')}/rt${path}` }
}

const closeAll = async (proxy: RunningProxy, ...others: { close(): Promise<void> }[]): Promise<void> => {
  for (const o of others) await o.close()
  await proxy.close()
}

t.test('frames pass byte for byte both ways: text, binary, fragmented, ping and pong, and the close code and reason', async (t) => {
  const upstream = await startWsUpstream({
    perMessageDeflate: false,
    onConnection: (c) => {
      c.ws.on('message', (data, binary) => {
        // Echo, then a fragmented text message and a ping.
        c.ws.send(data, { binary })
        if (!binary) {
          c.ws.send('part one ', { fin: false })
          c.ws.send('and two', { fin: true })
          c.ws.ping(Buffer.from('are you there'))
        }
      })
    },
  })
  const { proxy, sessions } = await proxyTo(upstream.url)
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime?model=m1`, { perMessageDeflate: false })
  await client.opened
  client.ws.send(JSON.stringify({ type: 'session.update', session: {} }))
  client.ws.send(Buffer.from([0, 1, 2, 255]), { binary: true })
  client.ws.send('tail', { fin: false })
  client.ws.send(' end', { fin: true })
  await client.message(5)
  const up = await upstream.connection(1)
  await up.message(3)
  client.ws.close(4001, 'bye from the client')
  const got = await up.closed
  t.same(got, { code: 4001, reason: 'bye from the client' }, 'the upstream got the client close code and reason')
  t.same(await client.closed, { code: 4001, reason: 'bye from the client' }, 'the client got the echoed close')
  await eventually('the session record', () => sessions.length === 1)
  t.same(client.tape.readAfterHead(), up.tape.writtenAfterHead(), 'what the upstream wrote after its 101 is what the client read')
  t.same(up.tape.readAfterHead(), client.tape.writtenAfterHead(), 'what the client wrote after the upgrade request is what the upstream read')
  t.ok(client.tape.readAfterHead().length > 0)
  t.equal(sessions[0].outcome, 'ok', 'an application close code from the client is an ok end')
  t.same(sessions[0].close, { from: 'client', code: 4001, reason: 'bye from the client' })
  await closeAll(proxy, upstream)
})

t.test('the upgrade request goes upstream with its headers, the prefix stripped and the query kept; the 101 comes back with the upstream headers', async (t) => {
  const upstream = await startWsUpstream({ handleProtocols: (protocols) => [...protocols][0] ?? false, perMessageDeflate: false })
  upstream.server.on('headers', () => {})
  const { proxy } = await proxyTo(upstream.url)
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime?model=gpt-realtime&x=1`, { headers: { authorization: 'Bearer sk-secret-key', 'x-custom': 'kept' } }, [
    'realtime',
    'openai-insecure-api-key.sk-other',
  ])
  await client.opened
  const up = await upstream.connection(1)
  t.equal(up.req.url, '/v1/realtime?model=gpt-realtime&x=1')
  t.equal(up.req.headers.authorization, 'Bearer sk-secret-key')
  t.equal(up.req.headers['x-custom'], 'kept')
  t.equal(up.req.headers['sec-websocket-protocol'], 'realtime,openai-insecure-api-key.sk-other')
  t.equal(client.ws.protocol, 'realtime', 'the subprotocol the upstream chose reached the client')
  const head = Buffer.concat(client.tape.read).toString('latin1')
  t.match(head, /^HTTP\/1\.1 101 Switching Protocols\r\n/)
  t.match(head, /\r\nSec-WebSocket-Accept: /i)
  client.ws.close(1000)
  await client.closed
  await eventually('the log line', () => proxy.logs.some((l) => l.msg === 'realtime session'))
  const text = JSON.stringify(proxy.logs)
  t.notMatch(text, /sk-secret-key|sk-other/, 'no credential reaches the log')
  const line = proxy.logs.find((l) => l.msg === 'realtime session') as Record<string, unknown>
  t.equal(line.path, '/v1/realtime', 'the log line has the path without its query')
  t.equal(line.model, 'gpt-realtime')
  t.equal(line.level, 30, 'a session that ended well logs at info')
  await closeAll(proxy, upstream)
})

t.test('permessage-deflate is agreed end to end and the measuring side still reads the compressed events', async (t) => {
  const upstream = await startWsUpstream({
    perMessageDeflate: { threshold: 0 },
    onConnection: (c) => {
      c.ws.on('message', (data) => {
        const event = JSON.parse(data.toString()) as { type: string }
        if (event.type !== 'response.create') return
        c.ws.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_1' } }))
        for (let i = 0; i < 5; i++) c.ws.send(JSON.stringify({ type: 'response.output_text.delta', response_id: 'resp_1', delta: ' the' }))
        c.ws.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_1', status: 'completed', usage: { input_tokens: 7, output_tokens: 5 } } }))
      })
    },
  })
  const { proxy, responses } = await proxyTo(upstream.url)
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`, { perMessageDeflate: { threshold: 0 } })
  await client.opened
  t.match(client.ws.extensions, /permessage-deflate/, 'the client and the upstream agreed on compression')
  for (let i = 0; i < 3; i++) {
    client.ws.send(JSON.stringify({ type: 'response.create' }))
    await client.message(7 * (i + 1))
  }
  await eventually('three responses', () => responses.length === 3)
  for (const r of responses) {
    t.equal(r.timing.textDeltas, 5, 'every delta was read (context takeover across messages)')
    t.equal(r.timing.streamedTokens, 5)
    t.same(r.usage, { inputText: 7, inputAudio: 0, outputText: 5, outputAudio: 0 })
  }
  const up = await upstream.connection(1)
  t.same(client.tape.readAfterHead(), up.tape.writtenAfterHead(), 'the compressed frames passed as they were')
  client.ws.close(1000)
  await client.closed
  await closeAll(proxy, upstream)
})

t.test('a refused upgrade comes back as the upstream answered it, and the session counts as an error', async (t) => {
  const upstream = await startWsUpstream({
    onUpgrade: (_req, socket) => {
      socket.end('HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nX-Upstream: yes\r\nContent-Length: 27\r\n\r\n{"error":"invalid_api_key"}')
      return true
    },
  })
  const { proxy, sessions } = await proxyTo(upstream.url)
  const answer = await rawExchange(
    Number(new URL(proxy.url).port),
    'GET /rt/v1/realtime HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
  )
  const text = answer.toString('latin1')
  t.match(text, /^HTTP\/1\.1 401 Unauthorized\r\n/)
  t.match(text, /\r\nX-Upstream: yes\r\n/i)
  t.match(text, /\r\n\r\n\{"error":"invalid_api_key"\}$/)
  await eventually('the session record', () => sessions.length === 1)
  t.equal(sessions[0].outcome, 'error')
  t.equal(sessions[0].statusCode, 401)
  await eventually('the log line', () => proxy.logs.some((l) => l.msg === 'realtime session'))
  t.equal(proxy.logs.find((l) => l.msg === 'realtime session')?.level, 40, 'a failed session logs at warn')
  t.equal(proxy.app.tokentap.realtime.open.size, 0, 'nothing left open')
  await closeAll(proxy, upstream)
})

t.test('an upstream that never answers the upgrade gets a 504 after the headers timeout; one that cannot be reached a 502', async (t) => {
  const upstream = await startWsUpstream({ onUpgrade: () => true })
  const { proxy, sessions } = await proxyTo(upstream.url, {}, { upstream: { headers_timeout_ms: 200 } })
  const port = Number(new URL(proxy.url).port)
  const upgrade = 'GET /rt/v1/realtime HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n'
  const answer = (await rawExchange(port, upgrade)).toString('latin1')
  t.match(answer, /^HTTP\/1\.1 504 /)
  t.match(answer, /TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT/)
  await eventually('the session record', () => sessions.length === 1)
  t.equal(sessions[0].failure, 'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT')
  t.equal(sessions[0].outcome, 'error')
  await closeAll(proxy, upstream)

  const gone = await proxyTo('http://127.0.0.1:1')
  const refused = (await rawExchange(Number(new URL(gone.proxy.url).port), upgrade)).toString('latin1')
  t.match(refused, /^HTTP\/1\.1 502 /)
  t.match(refused, /TOKENTAP_ERR_UPSTREAM_CONNECT/)
  await gone.proxy.close()
})

t.test('an upgrade that is not a WebSocket (h2c, with a body) is served as a plain request on the same connection', async (t) => {
  const { startUpstream } = await import('../helpers/upstream.ts')
  const upstream = await startUpstream((req, res, body) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.end(`${req.method} ${req.url} upgrade=${req.headers.upgrade ?? '-'} body=${body.toString()}`)
  })
  const { proxy } = await proxyTo(upstream.url)
  const port = Number(new URL(proxy.url).port)
  const socket = connect(port, '127.0.0.1')
  let got = ''
  socket.on('data', (c: Buffer) => (got += c.toString('latin1')))
  socket.write('POST /rt/a HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: 5\r\n\r\nhello')
  await eventually('the first answer', () => got.includes('body=hello'))
  socket.write('GET /rt/b HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually('the second answer on the same connection', () => got.includes('GET /b'))
  socket.destroy()
  t.match(got, /^HTTP\/1\.1 200 OK\r\n/)
  t.match(got, /POST \/a upgrade=- body=hello/)
  t.match(got, /GET \/b upgrade=- body=/)
  await closeAll(proxy, upstream)
})

t.test('a client that leaves mid-response: the response is cancelled, nothing stays in flight, the upstream connection is closed', async (t) => {
  const upstream = await startWsUpstream({
    onConnection: (c) => {
      c.ws.on('message', () => {
        c.ws.send(JSON.stringify({ type: 'response.created', response: { id: 'resp_1' } }))
        c.ws.send(JSON.stringify({ type: 'response.output_text.delta', response_id: 'resp_1', delta: ' the' }))
      })
    },
  })
  const { proxy, sessions, responses } = await proxyTo(upstream.url)
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  await client.opened
  client.ws.send(JSON.stringify({ type: 'response.create' }))
  await client.message(2)
  t.equal(proxy.app.tokentap.realtime.open.size, 1)
  client.ws.terminate()
  const up = await upstream.connection(1)
  const closed = await up.closed
  t.equal(closed.code, 1006, 'the upstream connection was closed (no close frame: the client sent none)')
  await eventually('the records', () => sessions.length === 1 && responses.length === 1)
  t.equal(responses[0].outcome, 'cancelled')
  t.equal(sessions[0].outcome, 'cancelled')
  t.equal(proxy.app.tokentap.realtime.open.size, 0, 'no session left open')
  await closeAll(proxy, upstream)
})

t.test("the caller's hooks run on an upgrade in the plugin form: a refused API key never reaches the upstream", async (t) => {
  const Fastify = (await import('fastify')).default
  const tokentap = (await import('../../src/plugin.ts')).default
  const upstream = await startWsUpstream()
  const app = Fastify()
  app.addHook('onRequest', async (request, reply) => {
    if (request.headers['x-api-key'] !== 'good') await reply.code(401).send({ error: 'bad key' })
  })
  await app.register(tokentap, { routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }] })
  app.get('/health', async () => ({ ok: true }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `ws://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const bad = tapedClient(`${base}/rt/v1/realtime`, { headers: { 'x-api-key': 'bad' } })
  await t.rejects(bad.opened, /401/)
  const good = tapedClient(`${base}/rt/v1/realtime`, { headers: { 'x-api-key': 'good' } })
  await good.opened
  t.equal(upstream.connections.length, 1, 'only the accepted client reached the upstream')
  good.ws.close(1000)
  await good.closed
  const health = await fetch(`http://127.0.0.1:${(app.server.address() as { port: number }).port}/health`, { headers: { 'x-api-key': 'good' } })
  t.equal(health.status, 200, "the caller's own routes still answer")
  await app.close()
  await upstream.close()
})

t.test('the idle timeout ends a silent session with 1001 on both sides', async (t) => {
  const upstream = await startWsUpstream()
  const { proxy, sessions } = await proxyTo(upstream.url, {}, { upstream: { idle_timeout_ms: 150 } })
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  await client.opened
  const up = await upstream.connection(1)
  const [toClient, toUpstream] = await Promise.all([client.closed, up.closed])
  t.equal(toClient.code, 1001)
  t.match(toClient.reason, /idle timeout/)
  t.equal(toUpstream.code, 1001)
  await eventually('the session record', () => sessions.length === 1)
  t.equal(sessions[0].outcome, 'error')
  t.equal(sessions[0].failure, 'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT')
  await closeAll(proxy, upstream)
})
