import { createServer } from 'node:http'
import { connect } from 'node:net'
import type { AddressInfo, Socket } from 'node:net'
import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { portOf } from '../helpers/raw-socket.ts'

// A request body that stops half-way is timed out (server.client_body_timeout_ms): 408 while
// nothing of the answer was sent, and the upstream side is let go, so a stalled client pins
// no upstream connection. Raw node:net clients send the bodies that stop.

function untilClosed(socket: Socket): Promise<string> {
  let text = ''
  socket.on('data', (b: Buffer) => (text += b.toString('latin1')))
  socket.on('error', () => {})
  return new Promise((resolve) => socket.once('close', () => resolve(text)))
}

t.test('a small body that stops half-way is answered 408 with its code, and recorded as such', async (t) => {
  let upstreamRequests = 0
  const upstream = await startUpstream((_req, res) => {
    upstreamRequests++
    res.end('{}')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], server: { host: '127.0.0.1', port: 0, client_body_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  const socket = connect(portOf(proxy.url), '127.0.0.1', () => {
    socket.write('POST /up/v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model":"gpt-4o-mini",')
  })
  const text = await untilClosed(socket)
  t.match(text, /^HTTP\/1\.1 408 /, 'answered 408')
  t.match(text, /TOKENTAP_ERR_CLIENT_BODY_TIMEOUT/)
  t.match(text, /connection: close/i, 'and the connection is closed after it')
  t.equal(upstreamRequests, 0, 'nothing went upstream')
  const [line] = await proxy.waitForRequests(1)
  t.match(line, { status: 408, error: 'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT' })
})

t.test('a streamed body that stops at 30 of 100 KB lets go of the upstream request and the client', async (t) => {
  let upstreamClosed: () => void = () => {}
  const closed = new Promise<void>((resolve) => (upstreamClosed = resolve))
  let received = 0
  // A plain server: it sees the body as it comes (the helper's upstream waits for the whole body).
  const upstream = createServer((req) => {
    req.on('data', (b: Buffer) => (received += b.length))
    req.socket.once('close', () => upstreamClosed())
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => upstream.close())
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstreamUrl }], server: { host: '127.0.0.1', port: 0, client_body_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  const socket = connect(portOf(proxy.url), '127.0.0.1', () => {
    socket.write('POST /up/v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n')
    socket.write(Buffer.alloc(30_000, 32))
  })
  const text = await untilClosed(socket)
  t.match(text, /^HTTP\/1\.1 408 /, 'the client is answered 408 (the upstream never answered)')
  await closed
  t.ok(received > 0 && received <= 30_000, `the upstream got the ${received} bytes sent, then its connection was closed`)
  const [line] = await proxy.waitForRequests(1)
  t.match(line, { error: 'TOKENTAP_ERR_CLIENT_BODY_TIMEOUT' })
})

t.test('a slow body that keeps sending is never cut by the body timeout', async (t) => {
  const upstream = await startUpstream((_req, res, body) => {
    res.end(String(body.length))
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], server: { host: '127.0.0.1', port: 0, client_body_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  const socket = connect(portOf(proxy.url), '127.0.0.1')
  const done = untilClosed(socket)
  socket.write('POST /up/v1/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 10\r\n\r\n')
  for (let i = 0; i < 10; i++) {
    // 100 ms between bytes: 1 s of body through a 300 ms idle timeout.
    await new Promise((r) => setTimeout(r, 100))
    socket.write('x')
  }
  t.match(await done, /^HTTP\/1\.1 200 [\s\S]*\r\n\r\n10$/, 'the whole body went upstream')
})
