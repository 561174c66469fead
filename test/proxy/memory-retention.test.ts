import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import type { IncomingMessage } from 'node:http'
import v8 from 'node:v8'
import vm from 'node:vm'
import t from 'tap'
import type { Test } from 'tap'
import { Agent } from 'undici'
import type { Dispatcher } from 'undici'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
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
 * Collects garbage until none of `refs` is alive, for up to 15 s: what the proxy no longer holds
 * goes once its socket writes have completed (their callbacks run a tick or two after the client
 * has the bytes, later on a loaded machine); what it keeps stays, as the stream is paused
 * meanwhile, so the deadline only bounds how long a failure takes to report.
 */
async function collectUntilFreed(refs: readonly WeakRef<object>[], ms = 15_000): Promise<number> {
  const deadline = performance.now() + ms
  for (;;) {
    gc()
    const alive = refs.filter((r) => r.deref() !== undefined).length
    if (alive === 0 || performance.now() > deadline) return alive
    await sleep(10)
  }
}

/**
 * Whether this Node frees an upstream socket read once nothing outside it holds a view of it:
 * a bare undici request (no tokentap) drops its header and data views while the response is
 * still open. Node 26 keeps a socket's read buffer alive with the socket, so there only the views
 * tokentap was handed can be checked, not the read behind them.
 */
async function runtimeFreesReads(): Promise<boolean> {
  let go: () => void = () => {}
  const later = new Promise<void>((r) => (go = r))
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    res.write(`${chatEvent('hello')}: ${'x'.repeat(48 * 1024)}\n\n`)
    await later
    res.end()
  })
  const agent = new Agent()
  let first: WeakRef<ArrayBufferLike> | undefined
  let got = 0
  const ended = new Promise<void>((resolve) => {
    agent.dispatch(
      { origin: upstream.url, path: '/', method: 'GET' },
      {
        onRequestStart: () => {},
        onResponseStart: (c) => {
          const unwrapped = c as unknown as { rawHeaders: Buffer[] | null }
          first = new WeakRef((unwrapped.rawHeaders as Buffer[])[0].buffer)
          unwrapped.rawHeaders = null
        },
        onResponseData: (_c, chunk) => {
          got += chunk.length
        },
        onResponseEnd: () => resolve(),
        onResponseError: () => resolve(),
      },
    )
  })
  await waitFor('the probe to read its first 48 KiB', () => got >= 48 * 1024)
  // A runtime that keeps the read keeps it for good: 3 s tells the two apart.
  const freed = first !== undefined && (await collectUntilFreed([first], 3000)) === 0
  go()
  await ended
  await agent.close()
  await upstream.close()
  return freed
}

t.test('the upstream read that carried the response headers is freed while the stream goes on', async (t) => {
  const freesReads = await runtimeFreesReads()
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
  let firstRead: WeakRef<object> | undefined
  const agent = new Agent()
  t.teardown(() => agent.close())
  const dispatcher = agent.compose(
    (dispatch) => (opts, handler) =>
      dispatch(
        opts,
        watchHeaders(handler, (raw) => (firstRead = new WeakRef(freesReads ? raw[0].buffer : raw[0]))),
      ),
  )
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] }, { dispatcher })
  t.teardown(() => proxy.close())

  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody() })
  let received = ''
  res.setEncoding('utf8').on('data', (s: string) => (received += s))
  await waitFor('the first read to reach the client', () => received.includes('hello'))
  t.ok(firstRead?.deref() !== undefined, 'the headers came in a socket read')
  await waitFor('all of the first read to reach the client', () => received.length >= FIRST.length)
  // On Node 26 a bare undici request frees the header view (while the socket keeps the read), but
  // through the proxy the view stays alive: not understood yet, so reported as a todo there.
  const todo = freesReads ? {} : { todo: 'Node 26 keeps the header view alive through the proxy; to investigate' }
  t.equal(
    await collectUntilFreed(firstRead === undefined ? [] : [firstRead]),
    0,
    freesReads ? 'nothing keeps that read alive once it was written and parsed' : 'nothing keeps the header view of that read (this Node keeps the read itself with its socket)',
    todo,
  )

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

/**
 * A streamed request with a 12 KiB body (under the 16 KiB bound, so read whole before the
 * upstream request starts), whose upstream sends one event and then holds the response open
 * until `finish`: what the proxy still keeps of the body is looked at in between. `watch` runs
 * once the proxy listens, before the request is sent.
 */
async function heldAfterFirstEvent(t: Test, watch: (proxy: RunningProxy) => void): Promise<{ body: string; finish: () => Promise<Record<string, unknown>> }> {
  let go: () => void = () => {}
  const later = new Promise<void>((r) => (go = r))
  const upstream = await startUpstream(async (req, res) => {
    for await (const _ of req);
    res.writeHead(200, SSE_HEADERS)
    res.write(chatEvent('hello'))
    await later
    res.end('data: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  watch(proxy)
  const body = chatBody('gpt-4o-mini', { padding: 'p'.repeat(12 * 1024) })
  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body })
  let received = ''
  res.setEncoding('utf8').on('data', (s: string) => (received += s))
  await waitFor('the first event to reach the client', () => received.includes('hello'))
  return {
    body,
    async finish() {
      go()
      await new Promise((r) => res.once('end', r))
      const [line] = await proxy.waitForRequests(1)
      return line
    },
  }
}

t.test('the socket reads a small request body came in are freed while its response streams', async (t) => {
  const reads: WeakRef<ArrayBufferLike>[] = []
  const held = await heldAfterFirstEvent(t, (proxy) => proxy.app.server.on('request', (req: IncomingMessage) => req.on('data', (chunk: Buffer) => reads.push(new WeakRef(chunk.buffer)))))
  t.ok(reads.length > 0, 'the body came in socket reads')
  t.equal(await collectUntilFreed(reads), 0, 'none of them is kept once the body was copied and sent')
  const line = await held.finish()
  t.equal(line.outcome, 'ok')
  t.equal(line.bytes_in, Buffer.byteLength(held.body))
})

t.test('a small request body read whole is freed once sent, while its response streams', async (t) => {
  // What undici wrote upstream as the body: the proxy's own copy of it (a Buffer body stayed in
  // undici's request, and in its abort closure, until the response ended).
  const sent: WeakRef<object>[] = []
  const onChunk = (message: unknown): void => void sent.push(new WeakRef((message as { chunk: Buffer }).chunk))
  subscribe('undici:request:bodyChunkSent', onChunk)
  t.teardown(() => unsubscribe('undici:request:bodyChunkSent', onChunk))
  const held = await heldAfterFirstEvent(t, () => {})
  t.equal(sent.length, 1, 'the body went upstream in one piece')
  t.equal(await collectUntilFreed(sent), 0, 'the copy is not kept while the response streams')
  const line = await held.finish()
  t.equal(line.outcome, 'ok')
  t.equal(line.bytes_in, Buffer.byteLength(held.body))
})
