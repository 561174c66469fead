import type { IncomingMessage } from 'node:http'
import v8 from 'node:v8'
import vm from 'node:vm'
import t from 'tap'
import { Agent } from 'undici'
import type { Dispatcher } from 'undici'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { proxyWithSockets } from '../helpers/watched-sockets.ts'
import { SSE_HEADERS, chatBody, chatEvent, openRequest, sleep, waitFor } from '../helpers/faults.ts'

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void

/** Passes every call through to `inner`, showing the controller's raw headers to `onHeaders` first. */
function watchHeaders(inner: Dispatcher.DispatchHandler, onHeaders: (raw: Buffer[]) => void): Dispatcher.DispatchHandler {
  return {
    onRequestStart: (c, context) => inner.onRequestStart?.(c, context),
    onResponseStart: (c, status, headers, message) => {
      onHeaders((c as unknown as { rawHeaders: Buffer[] }).rawHeaders)
      inner.onResponseStart?.(c, status, headers, message)
    },
    onResponseData: (c, chunk) => inner.onResponseData?.(c, chunk),
    onResponseEnd: (c, trailers) => inner.onResponseEnd?.(c, trailers),
    onResponseError: (c, err) => inner.onResponseError?.(c, err),
  }
}

/**
 * Collects garbage until none of `refs` is alive, for up to a second: what the proxy no longer
 * holds goes once its socket writes have completed (their callbacks run a tick or two after the
 * client has the bytes), whatever the load; what it keeps stays, as the stream is paused meanwhile.
 */
async function collectUntilFreed(refs: readonly WeakRef<object>[]): Promise<number> {
  const deadline = performance.now() + 1000
  for (;;) {
    gc()
    const alive = refs.filter((r) => r.deref() !== undefined).length
    if (alive === 0 || performance.now() > deadline) return alive
    await sleep(10)
  }
}

t.test('the upstream read that carried the response headers is freed while the stream goes on', async (t) => {
  let go: () => void = () => {}
  const later = new Promise<void>((r) => (go = r))
  const FIRST = `${chatEvent('hello')}: ${'x'.repeat(48 * 1024)}\n\n`
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    // Headers and 48 KiB of body in one read.
    res.write(FIRST)
    await later
    res.end(`${chatEvent(' world')}data: [DONE]\n\n`)
  })
  t.teardown(() => upstream.close())
  let firstRead: WeakRef<ArrayBufferLike> | undefined
  const agent = new Agent()
  t.teardown(() => agent.close())
  const dispatcher = agent.compose((dispatch) => (opts, handler) => dispatch(opts, watchHeaders(handler, (raw) => (firstRead = new WeakRef(raw[0].buffer)))))
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] }, { dispatcher })
  t.teardown(() => proxy.close())

  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody() })
  let received = ''
  res.setEncoding('utf8').on('data', (s: string) => (received += s))
  await waitFor('the first read to reach the client', () => received.includes('hello'))
  t.ok(firstRead?.deref() !== undefined, 'the headers came in a socket read')
  await waitFor('all of the first read to reach the client', () => received.length >= FIRST.length)
  t.equal(await collectUntilFreed(firstRead === undefined ? [] : [firstRead]), 0, 'nothing keeps that read alive once it was written and parsed')

  go()
  await new Promise((r) => res.once('end', r))
  t.match(received, /world[\s\S]*\[DONE\]/)
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  t.equal(line.chunks, 2)
})

t.test('a stalled reader costs the proxy its marks (8 bytes a chunk) and bounded buffers, however much the kernel took', async (t) => {
  const EVENT = chatEvent('tok')
  const TOTAL = 200_000 // ~33 MiB: more than loopback's socket buffers take
  let written = 0
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    const batch = EVENT.repeat(100)
    while (written < TOTAL) {
      written += 100
      if (!res.write(batch)) await new Promise((r) => res.once('drain', r))
      if (res.destroyed) return
    }
    res.end('data: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  const { proxy, upstreamSockets, clientSockets } = await proxyWithSockets(t, upstream.url)

  const { res, req } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody() })
  res.pause()
  res.socket.pause()
  t.teardown(() => req.destroy())
  const [ex] = proxy.app.tokentap.active
  let prev = -1
  await waitFor(
    'the proxy to stop moving chunks',
    async () => {
      await sleep(300)
      const moved = ex.chunks.count !== prev
      prev = ex.chunks.count
      return !moved && prev > 0
    },
    20_000,
  )
  const marks = ex.chunks.count
  t.ok(marks < TOTAL, `backpressure held the upstream back (${marks} of ${TOTAL} chunks)`)
  t.ok(ex.chunks.byteLength <= 8 * marks + 8 * 1024, `marks: ${ex.chunks.byteLength} bytes for ${marks} chunks`)
  const buffered = clientSockets.reduce((n, s) => n + s.writableLength, 0) + upstreamSockets.reduce((n, s) => n + s.readableLength, 0)
  t.ok(buffered < 512 * 1024, `bytes buffered in the proxy: ${Math.round(buffered / 1024)} KiB`)
})

t.test('the socket reads a small request body came in are freed while its response streams', async (t) => {
  let go: () => void = () => {}
  const later = new Promise<void>((r) => (go = r))
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    res.write(chatEvent('hello'))
    await later
    res.end('data: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const reads: WeakRef<ArrayBufferLike>[] = []
  proxy.app.server.on('request', (req: IncomingMessage) => req.on('data', (chunk: Buffer) => reads.push(new WeakRef(chunk.buffer))))

  // 12 KiB: under the 16 KiB bound, so read whole before the upstream request starts (not streamed).
  const body = chatBody('gpt-4o-mini', { padding: 'p'.repeat(12 * 1024) })
  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body })
  let received = ''
  res.setEncoding('utf8').on('data', (s: string) => (received += s))
  await waitFor('the first event to reach the client', () => received.includes('hello'))
  t.ok(reads.length > 0, 'the body came in socket reads')
  t.equal(await collectUntilFreed(reads), 0, 'none of them is kept once the body was copied and sent')
  go()
  await new Promise((r) => res.once('end', r))
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  t.equal(line.bytes_in, Buffer.byteLength(body))
})
