import { connect } from 'node:net'
import type { Socket } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { portOf } from '../helpers/raw-socket.ts'

// Client connections that send nothing, stop inside their request head, or sit idle between
// requests are closed by the proxy's own timers: thousands of them cannot be held for free.

/** Resolves with what the server wrote before closing the socket, and how long it took (ms). */
function untilClosed(socket: Socket): Promise<{ text: string; ms: number }> {
  const started = performance.now()
  let text = ''
  socket.on('data', (b: Buffer) => (text += b.toString('latin1')))
  return new Promise((resolve) => socket.once('close', () => resolve({ text, ms: performance.now() - started })))
}

async function setup(t: Test) {
  const upstream = await startUpstream((_req, res) => {
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], server: { host: '127.0.0.1', port: 0, request_head_timeout_ms: 300, keep_alive_timeout_ms: 400 } })
  t.teardown(() => proxy.close())
  return proxy
}

t.test('a connection that sends nothing is closed at the request head timeout', async (t) => {
  const proxy = await setup(t)
  const socket = connect(portOf(proxy.url), '127.0.0.1')
  const { ms } = await untilClosed(socket)
  t.ok(ms >= 250 && ms < 5000, `closed after ${Math.round(ms)} ms`)
})

t.test('a connection that stops in the middle of its request head is closed at the request head timeout', async (t) => {
  const proxy = await setup(t)
  const socket = connect(portOf(proxy.url), '127.0.0.1', () => socket.write('GET /up/x HTTP/1.1\r\nHost: a\r\nX-Half: '))
  const { ms } = await untilClosed(socket)
  t.ok(ms >= 250 && ms < 5000, `closed after ${Math.round(ms)} ms`)
})

t.test('an idle keep-alive connection is closed at the keep-alive timeout, after its answer', async (t) => {
  const proxy = await setup(t)
  const socket = connect(portOf(proxy.url), '127.0.0.1', () => socket.write('GET /up/x HTTP/1.1\r\nHost: a\r\n\r\n'))
  const { text, ms } = await untilClosed(socket)
  t.match(text, /^HTTP\/1\.1 200/, 'the request was answered')
  t.ok(ms >= 350 && ms < 5000, `closed ${Math.round(ms)} ms after connecting`)
})

t.test('a connection that sent its head in time is not cut by the head timer while its answer streams', async (t) => {
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    for (let i = 0; i < 8; i++) {
      res.write('x')
      await new Promise((r) => setTimeout(r, 100))
    }
    res.end()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], server: { host: '127.0.0.1', port: 0, request_head_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/up/slow`)
  t.equal(await res.text(), 'xxxxxxxx', 'an answer of 800 ms came whole through a 300 ms head timeout')
})
