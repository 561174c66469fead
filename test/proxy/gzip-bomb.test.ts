import { gzipSync } from 'node:zlib'
import t from 'tap'
import { select, sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { chatEvent, openRequest, readAll } from '../helpers/faults.ts'

t.test('a gzip bomb passes to the client unchanged and is not inflated to the end: the exchange finishes, not measured', async (t) => {
  const bomb = gzipSync(Buffer.alloc(256 * 1024 * 1024))
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip', 'content-length': bomb.length })
    res.end(bomb)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: '{"model":"m","stream":true}' })
  t.ok((await readAll(res)).equals(bomb), 'the compressed bytes, unchanged')
  const [line] = await proxy.waitForRequests(1, 30_000)
  t.equal(line.chunks, 0, 'no content measured')
  const m = await proxy.scrape()
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
  )
  t.equal(sumOf(m, 'llm_parse_errors_total'), 1)
})

t.test('an ordinary gzip stream is still inflated and measured', async (t) => {
  const text = `${Array.from({ length: 2000 }, (_, i) => chatEvent(` w${i}`)).join('')}data: [DONE]\n\n`
  const body = gzipSync(text)
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip', 'content-length': body.length })
    res.end(body)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: '{"model":"m","stream":true}' })
  t.ok((await readAll(res)).equals(body))
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'ok')
  t.equal(line.chunks, 2000, 'every content chunk measured')
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_parse_errors_total'), 0)
})
