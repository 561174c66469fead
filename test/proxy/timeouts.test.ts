import t from 'tap'
import { validateConfig } from '../../src/config/load-config.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { sumOf } from '../helpers/prometheus.ts'
import { SSE_HEADERS, chatBody, chatEvent, readAll, openRequest, sleep } from '../helpers/faults.ts'

/** An upstream that streams one event after each gap (ms), then ends. */
const gapsUpstream = (gaps: readonly number[]) =>
  startUpstream(async (_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    for (const gap of gaps) {
      await sleep(gap)
      if (res.destroyed) return
      res.write(chatEvent(' the'))
    }
    res.end('data: [DONE]\n\n')
  })

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

t.test('a stream longer than the idle timeout survives when no gap is', async (t) => {
  // 30 gaps of 100 ms: 3 s in all, against an idle limit of 1 s (undici checks body timeouts
  // with timers of about 1 s resolution, so limits in tests stay at 1 s and gaps far from it).
  const upstream = await gapsUpstream(Array.from({ length: 30 }, () => 100))
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { idle_timeout_ms: 1000 } })
  t.teardown(() => proxy.close())
  const { status, body } = await stream(proxy.url)
  t.equal(status, 200)
  const text = (await body).toString()
  t.equal(text.split('data: ').length - 1, 31, 'every event and [DONE] arrived')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  t.ok((line.e2e_ms as number) > 2000, 'the stream outlived the idle limit')
})

t.test('a gap between reads longer than the idle timeout breaks the stream and is counted as an error', async (t) => {
  const upstream = await gapsUpstream([10, 10, 4000, 10])
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { idle_timeout_ms: 1000 } })
  t.teardown(() => proxy.close())
  const { status, body } = await stream(proxy.url)
  t.equal(status, 200)
  await t.rejects(body, 'the client sees a broken stream')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.error, 'TOKENTAP_ERR_UPSTREAM_IDLE_TIMEOUT')
  t.equal(line.error_detail, 'UND_ERR_BODY_TIMEOUT')
  t.equal(line.chunks, 2)
  await t.resolves(async () => {
    while (upstream.aborted !== 1) await sleep(5)
  }, 'the upstream request was closed')
})

t.test('the total timeout cuts a stream that has started and answers 504 to one that has not', async (t) => {
  const upstream = await startUpstream(async (req, res) => {
    if (req.url?.includes('slow-headers')) return
    res.writeHead(200, SSE_HEADERS)
    for (let i = 0; i < 100 && !res.destroyed; i++) {
      res.write(chatEvent(' the'))
      await sleep(20)
    }
    res.end()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { total_timeout_ms: 300 } })
  t.teardown(() => proxy.close())

  const { status, body } = await stream(proxy.url)
  t.equal(status, 200)
  await t.rejects(body, 'a started stream is broken at the limit')

  const res = await fetch(`${proxy.url}/up/slow-headers`, { method: 'POST', body: '{}' })
  t.equal(res.status, 504)
  t.same(await res.json(), { error: { message: 'the upstream request took longer than 300 ms', type: 'proxy_error', code: 'TOKENTAP_ERR_UPSTREAM_TIMEOUT' } })

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
