import t from 'tap'
import http from 'node:http'
import { startProxy } from '../helpers/proxy.ts'
import { sseEvents, startUpstream } from '../helpers/upstream.ts'
import { rawRequest } from '../helpers/http.ts'
import { fixture } from '../helpers/fixtures.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { proxyWithSockets } from '../helpers/watched-sockets.ts'
import { SseJsonParser } from '../../src/parsers/sse-json-parser.ts'

const STREAM = fixture('openai/chat-text-role-first-usage-chunk.sse')
const EVENTS = sseEvents(STREAM.toString('utf8'))

t.test('events written as many HTTP chunks in one go reach the client unchanged and count as one burst', async (t) => {
  // Each res.write is its own HTTP chunk; written in one tick they arrive in one read, which the
  // proxy writes on as one piece and measures as one arrival time.
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const e of EVENTS) res.write(e)
    res.end()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/p', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())

  const res = await rawRequest(`${proxy.url}/p/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"gpt-4o","stream":true}' })
  t.equal(res.status, 200)
  t.ok(res.body.equals(STREAM), 'the body is byte for byte the upstream body')
  const [line] = await proxy.waitForRequests(1)
  t.ok((line.chunks as number) > 1, `${line.chunks} content chunks measured`)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count'), (line.chunks as number) - 1, 'one gap per chunk after the first')
  t.ok(sumOf(m, 'llm_inter_chunk_latency_seconds_sum') < 0.05, 'the chunks of one read arrive together (a burst)')
})

t.test('a client that stops reading pauses the upstream: the proxy does not buffer the stream', async (t) => {
  const TOTAL = 64 * 1024 * 1024
  let written = 0
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const event = Buffer.from(`data: {"choices":[{"delta":{"content":"${'x'.repeat(1000)}"}}]}\n\n`)
    while (written < TOTAL && !res.destroyed) {
      if (!res.write(event)) {
        // Both listeners go once either fires: a listener left per wait would pile up on res.
        await new Promise<void>((resolve) => {
          const done = (): void => {
            res.off('drain', done).off('close', done)
            resolve()
          }
          res.on('drain', done).on('close', done)
        })
      }
      written += event.length
    }
    res.end()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/p', upstream: upstream.url, provider: 'openai' }] })
  t.teardown(() => proxy.close())

  const req = http.request(`${proxy.url}/p/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } })
  const res = await new Promise<http.IncomingMessage>((resolve) => req.on('response', resolve).end('{"stream":true}'))
  res.pause()
  res.socket.pause()
  // Give the stream time to fill every buffer on the way.
  let before = -1
  for (let i = 0; i < 100 && before !== written; i++) {
    before = written
    await new Promise((r) => setTimeout(r, 100))
  }
  t.ok(written < TOTAL / 2, `the upstream was held back after ${(written / 2 ** 20).toFixed(1)} MiB of ${TOTAL / 2 ** 20} MiB`)
  res.destroy()
})

t.test('each read is handed to the client socket before the parser sees it', async (t) => {
  // Node's res.write corks the socket until the next tick; tokentap uncorks at once, so parsing a
  // read never delays its bytes. Checked from inside the parser: the proxy's client socket has
  // nothing corked and nothing queued when push() runs.
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const e of EVENTS) {
      res.write(e)
      await new Promise((r) => setTimeout(r, 5))
    }
    res.end()
  })
  t.teardown(() => upstream.close())
  const { proxy, clientSockets } = await proxyWithSockets(t, upstream.url)
  const seen: { corked: number; queued: number }[] = []
  const push = SseJsonParser.prototype.push
  SseJsonParser.prototype.push = function (this: SseJsonParser, chunk: Uint8Array) {
    const socket = clientSockets[0]
    seen.push({ corked: socket.writableCorked, queued: socket.writableLength })
    return push.call(this, chunk)
  }
  t.teardown(() => {
    SseJsonParser.prototype.push = push
  })

  const res = await rawRequest(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"gpt-4o","stream":true}' })
  t.ok(res.body.equals(STREAM), 'the body is byte for byte the upstream body')
  t.ok(seen.length >= 2, `the parser saw ${seen.length} reads`)
  t.same(
    seen.filter((s) => s.corked !== 0 || s.queued !== 0),
    [],
    'every read was already with the kernel',
  )
})
