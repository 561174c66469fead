import t from 'tap'
import { validateConfig } from '../../src/config/load-config.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { SSE_HEADERS, chatBody, chatEvent, readAll, openRequest, sleep, waitFor } from '../helpers/faults.ts'
import { portOf, rawExchange, startRawUpstream } from '../helpers/raw-socket.ts'
import type { RawUpstream } from '../helpers/raw-socket.ts'

const stream = async (url: string): Promise<{ status: number; body: Promise<Buffer> }> => {
  const { res } = await openRequest(`${url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody() })
  return { status: res.statusCode ?? 0, body: readAll(res) }
}

t.test('the defaults never cut a healthy long stream: no total limit, and the idle limit is long', async (t) => {
  const config = validateConfig({ routes: [{ prefix: '/x', simulator: {} }] })
  t.equal(config.upstream.total_timeout_ms, 0, 'no total limit by default')
  t.ok(config.upstream.idle_timeout_ms >= 60_000, 'idle limit of a minute or more between reads')
  t.ok(config.upstream.headers_timeout_ms >= 60_000, 'a slow first byte (long prompts, queues) is waited for')
  const proxy = await startProxy({ routes: [{ prefix: '/x', simulator: {} }] })
  t.teardown(() => proxy.close())
  t.equal(proxy.app.server.requestTimeout, 0, "Node's request timeout is off on the proxy listener")
  t.equal(proxy.app.server.timeout, 0, 'no socket inactivity timeout on the proxy listener')
})

/** One chunk of a chunked body, framed as Node's server frames it (lower-case hex size). */
const chunked = (text: string): string => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`

const SSE_HEAD = 'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n'

/**
 * A raw upstream that sends the head and the first event, then one event after each gap (ms),
 * then the end (or nothing: a stall). `requestClosed()`: the connection the request came on has closed.
 */
async function rawGapsUpstream(gaps: readonly number[], end: 'done' | 'stall'): Promise<{ upstream: RawUpstream; requestClosed: () => boolean }> {
  let requestClosed = false
  const upstream = await startRawUpstream((socket) => {
    socket.once('close', () => (requestClosed = true))
    socket.write(SSE_HEAD + chunked(chatEvent(' the')))
    void (async () => {
      for (const gap of gaps) {
        await sleep(gap)
        if (socket.destroyed) return
        socket.write(chunked(chatEvent(' the')))
      }
      if (end === 'done') socket.write(`${chunked('data: [DONE]\n\n')}0\r\n\r\n`)
    })()
  })
  return { upstream, requestClosed: () => requestClosed }
}

const rawPost = (proxy: { url: string }): Promise<Buffer> =>
  rawExchange(
    portOf(proxy.url),
    `POST /up/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(chatBody())}\r\n\r\n${chatBody()}`,
    30_000,
  )

t.test('an upstream that stalls after its head and one event is cut at the idle timeout: a broken stream, an idle-timeout error', async (t) => {
  const { upstream, requestClosed } = await rawGapsUpstream([], 'stall')
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { idle_timeout_ms: 300 } })
  t.teardown(() => proxy.close())

  const got = (await rawPost(proxy)).toString('latin1')
  t.match(got, /^HTTP\/1\.1 200 OK\r\n/, 'the head was relayed')
  t.match(got, /\r\ntransfer-encoding: chunked\r\n/i)
  t.ok(got.endsWith(`\r\n\r\n${chunked(chatEvent(' the'))}`), 'the one event arrived, and then the connection closed')
  t.notOk(got.endsWith('0\r\n\r\n'), 'no last chunk: the client cannot take it for a clean end')

  const [line] = await proxy.waitForRequests(1)
  t.same([line.outcome, line.status, line.error, line.error_detail, line.chunks], ['error', 200, 'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT', undefined, 1])
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '200' }), 1, 'counted once, as an error with the status sent')
  t.equal(sumOf(m, 'llm_requests_total'), 1)
  t.equal(sumOf(m, 'llm_requests_in_flight'), 0, 'nothing left in flight')
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count'), 1, 'what came before the stall is measured')
  await waitFor('the upstream connection to close', requestClosed)
  t.equal(upstream.heads.length, 1, 'the request went upstream once')
})

t.test('a stream whose every gap is just under the idle timeout is never cut, however long it runs', async (t) => {
  // Each gap is 60 % of the limit: every firing of the proxy's timer finds a read less than the
  // limit ago and waits for the rest, five times over.
  const { upstream } = await rawGapsUpstream([600, 600, 600, 600, 600], 'done')
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { idle_timeout_ms: 1000 } })
  t.teardown(() => proxy.close())

  const got = (await rawPost(proxy)).toString('latin1')
  t.match(got, /^HTTP\/1\.1 200 OK\r\n/)
  t.equal(got.split('data: ').length - 1, 7, 'every event and [DONE] arrived')
  t.ok(got.endsWith('0\r\n\r\n'), 'a clean end')
  const [line] = await proxy.waitForRequests(1)
  t.same([line.outcome, line.error, line.chunks], ['ok', undefined, 6])
  t.ok((line.e2e_ms as number) > 3000, 'the stream outlived the idle limit three times over')
})

t.test('the total timeout cuts a stream that has started and answers 504 to one that has not', async (t) => {
  const upstream = await startUpstream(async (req, res) => {
    if (req.url?.includes('slow-headers')) return
    // Streams until the proxy cuts it: only the limit can end it, however slow the machine.
    res.writeHead(200, SSE_HEADERS)
    while (!res.destroyed) {
      res.write(chatEvent(' the'))
      await sleep(20)
    }
  })
  t.teardown(() => upstream.close())
  // Long enough for the head to arrive first on a loaded machine; the stream never ends before it.
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { total_timeout_ms: 3000 } })
  t.teardown(() => proxy.close())

  const { status, body } = await stream(proxy.url)
  t.equal(status, 200)
  await t.rejects(body, 'a started stream is broken at the limit')

  const res = await fetch(`${proxy.url}/up/slow-headers`, { method: 'POST', body: '{}' })
  t.equal(res.status, 504)
  t.same(await res.json(), { error: { message: 'the upstream request took longer than 3000 ms', type: 'proxy_error', code: 'TOKENTAP_ERR_UPSTREAM_TIMEOUT' } })

  const lines = await proxy.waitForRequests(2)
  t.same(
    lines.map((l) => [l.outcome, l.error]),
    [
      ['error', 'TOKENTAP_ERR_UPSTREAM_TIMEOUT'],
      ['error', 'TOKENTAP_ERR_UPSTREAM_TIMEOUT'],
    ],
  )
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '504' }), 1)
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '200' }), 1)
})

t.test("the headers timeout answers 504 with its code on the proxy's own timer, also after a streamed request body", async (t) => {
  const upstream = await startUpstream(() => {}, { raw: true })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { headers_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  for (const headers of [{ 'content-type': 'application/json' }, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }]) {
    const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers, body: chatBody() })
    t.equal(res.statusCode, 504)
    const body = JSON.parse((await readAll(res)).toString()) as { error: { code: string } }
    t.equal(body.error.code, 'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT')
  }
  const lines = await proxy.waitForRequests(2)
  t.same(
    lines.map((l) => [l.outcome, l.status]),
    [
      ['error', 504],
      ['error', 504],
    ],
  )
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { status_code: '504' }), 2)
})
