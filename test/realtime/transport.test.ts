import type { Socket } from 'node:net'
import t from 'tap'
import { WebSocket } from 'ws'
import { startProxy } from '../helpers/proxy.ts'
import { makeTestCa } from '../helpers/test-ca.ts'
import { startTinyproxy } from '../helpers/tinyproxy.ts'
import { eventually, startWsUpstream, tapedClient } from '../helpers/realtime.ts'
import { proxyWithSockets } from '../helpers/watched-sockets.ts'

const ca = makeTestCa()
t.teardown(() => ca.remove())

const opened = (ws: WebSocket): Promise<void> =>
  new Promise((resolve, reject) => {
    ws.once('open', () => resolve())
    ws.once('error', reject)
  })
const nextMessage = (ws: WebSocket): Promise<string> => new Promise((resolve) => ws.once('message', (d) => resolve(d.toString())))
const closed = (ws: WebSocket): Promise<number> => new Promise((resolve) => ws.once('close', (code) => resolve(code)))

t.test('a TLS upstream (the route’s own CA) and a TLS listener: the session is relayed over both', async (t) => {
  const upstream = await startWsUpstream({ tls: { key: ca.read(ca.serverKey), cert: ca.read(ca.serverCert) }, onConnection: (c) => c.ws.on('message', (d) => c.ws.send(`echo ${d.toString()}`)) })
  const proxy = await startProxy({
    server: { host: '127.0.0.1', port: 0, tls: { cert: ca.serverCert, key: ca.serverKey } },
    routes: [{ prefix: '/rt', upstream: `https://localhost:${upstream.port}`, tls: { ca: ca.caCert }, provider: 'openai' }],
  })
  const ws = new WebSocket(`${proxy.url.replace('http', 'wss')}/rt/v1/realtime`, { ca: ca.read(ca.caCert) })
  await opened(ws)
  ws.send('hi')
  t.equal(await nextMessage(ws), 'echo hi')
  ws.close(1000)
  t.equal(await closed(ws), 1000)
  await upstream.close()
  await proxy.close()
})

t.test('a route with a forward proxy: the upgrade goes through its CONNECT tunnel', async (t) => {
  const tinyproxy = await startTinyproxy(t)
  if (tinyproxy === undefined) return
  const upstream = await startWsUpstream({ onConnection: (c) => c.ws.on('message', (d) => c.ws.send(`echo ${d.toString()}`)) })
  const proxy = await startProxy({ routes: [{ prefix: '/rt', upstream: upstream.url, proxy: tinyproxy.url, provider: 'openai' }] })
  const ws = new WebSocket(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  await opened(ws)
  ws.send('through')
  t.equal(await nextMessage(ws), 'echo through')
  t.same(tinyproxy.connects(), [`127.0.0.1:${upstream.port}`])
  ws.close(1000)
  await closed(ws)
  await upstream.close()
  await proxy.close()
})

/** Sends `block` until 2 MiB wait in the sender's own buffer (its peer is held back), or 64 MiB went; returns the bytes sent. */
async function sendUntilHeldBack(ws: WebSocket, block: Buffer): Promise<number> {
  let sent = 0
  while (ws.bufferedAmount < 2 * 1024 * 1024 && sent < 64 * 1024 * 1024) {
    ws.send(block)
    sent += block.length
    await new Promise((r) => setImmediate(r))
  }
  return sent
}

t.test('backpressure both ways: a side that stops reading holds the other back, and the proxy buffers only what the sockets do', async (t) => {
  const block = Buffer.alloc(64 * 1024, 0x61)
  const upstream = await startWsUpstream({ perMessageDeflate: false })
  const { proxy, upstreamSockets, clientSockets } = await proxyWithSockets(t, upstream.url)
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/up/v1/realtime`, { perMessageDeflate: false })
  await client.opened
  const conn = await upstream.connection(1)

  // Upstream → client: the client stops reading; the upstream writes until its own buffer grows.
  client.socket.pause()
  const sent = await sendUntilHeldBack(conn.ws, block)
  t.ok(conn.ws.bufferedAmount >= 2 * 1024 * 1024, 'the upstream felt the backpressure (its own buffer grew)')
  const toClient = clientSockets.find((s) => !s.destroyed) as Socket
  const fromUpstream = upstreamSockets.find((s) => !s.destroyed) as Socket
  t.ok(toClient.writableLength <= 1024 * 1024, `the proxy holds ${toClient.writableLength} bytes for the client`)
  t.ok(fromUpstream.readableLength <= 1024 * 1024, `and ${fromUpstream.readableLength} read from the upstream`)
  t.ok(fromUpstream.isPaused(), 'the proxy stopped reading the upstream')
  client.socket.resume()
  await client.message(sent / block.length)
  t.equal(client.messages.length, sent / block.length, 'every message arrived once the client read again')

  // Client → upstream: the upstream stops reading.
  const raw = (conn.ws as unknown as { _socket: Socket })._socket
  raw.pause()
  const up = await sendUntilHeldBack(client.ws, block)
  t.ok(client.ws.bufferedAmount >= 2 * 1024 * 1024, 'the client felt the backpressure')
  const toUpstream = upstreamSockets.find((s) => !s.destroyed) as Socket
  const fromClient = clientSockets.find((s) => !s.destroyed) as Socket
  t.ok(toUpstream.writableLength <= 1024 * 1024, `the proxy holds ${toUpstream.writableLength} bytes for the upstream`)
  t.ok(fromClient.isPaused(), 'the proxy stopped reading the client')
  raw.resume()
  await conn.message(up / block.length)
  t.equal(conn.messages.length, up / block.length)
  client.ws.close(1000)
  await client.closed
  await upstream.close()
})

t.test('shutting down: a session between responses is closed with 1001 at once, one in a response when it ends', async (t) => {
  const upstream = await startWsUpstream({
    onConnection: (c) =>
      c.ws.on('message', (d) => {
        const e = JSON.parse(d.toString()) as { type: string }
        if (e.type !== 'response.create') return
        c.ws.send(JSON.stringify({ type: 'response.created', response: { id: 'r1' } }))
        c.ws.once('message', () => c.ws.send(JSON.stringify({ type: 'response.done', response: { id: 'r1', status: 'completed' } })))
      }),
  })
  const proxy = await startProxy({ routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }] })
  const idle = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  const busy = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  await Promise.all([idle.opened, busy.opened])
  busy.ws.send(JSON.stringify({ type: 'response.create' }))
  await busy.message(1)
  const closing = proxy.app.close()
  const idleClosed = await idle.closed
  t.same(idleClosed, { code: 1001, reason: 'tokentap is shutting down' })
  t.equal(busy.ws.readyState, WebSocket.OPEN, 'the session with a response in flight stays open')
  busy.ws.send(JSON.stringify({ type: 'go on' }))
  await busy.message(2)
  t.same(await busy.closed, { code: 1001, reason: 'tokentap is shutting down' }, 'closed once its response ended')
  await closing
  t.equal(proxy.app.tokentap.realtime.open.size, 0)
  await upstream.close()
})

t.test('the total timeout ends a session that runs too long', async (t) => {
  const upstream = await startWsUpstream()
  const proxy = await startProxy({ upstream: { total_timeout_ms: 200 }, routes: [{ prefix: '/rt', upstream: upstream.url, provider: 'openai' }] })
  const sessions: string[] = []
  proxy.app.tokentap.realtime.listen({ session: (_w, _l, s) => sessions.push(`${s.outcome} ${s.failure}`) })
  const client = tapedClient(`${proxy.url.replace('http', 'ws')}/rt/v1/realtime`)
  await client.opened
  // Traffic keeps it from being idle; only the total limit applies.
  const keepAlive = setInterval(() => client.ws.ping(), 20)
  const got = await client.closed
  clearInterval(keepAlive)
  t.same(got, { code: 1001, reason: 'tokentap total timeout' })
  await eventually('the session record', () => sessions.length === 1)
  t.same(sessions, ['error TOKENTAP_ERR_UPSTREAM_TIMEOUT'])
  await upstream.close()
  await proxy.close()
})
