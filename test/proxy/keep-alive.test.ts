import { Agent } from 'node:http'
import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { type openRequest, readAll } from '../helpers/faults.ts'

t.test('upstream connections are pooled and reused across requests', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{}')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const REQUESTS = 10
  for (let i = 0; i < REQUESTS; i++) {
    const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', body: '{"model":"m"}' })
    await res.arrayBuffer()
  }
  t.equal(upstream.requests.length, REQUESTS)
  t.equal(upstream.sockets, 1, 'one upstream connection served every request')
})

t.test('a POST the upstream resets is never retried', async (t) => {
  const upstream = await startUpstream((req) => {
    req.socket.resetAndDestroy()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', body: '{"model":"m"}' })
  t.equal(res.status, 502)
  const body = (await res.json()) as { error: { code: string } }
  t.equal(body.error.code, 'TOKENTAP_ERR_UPSTREAM_FAILED')
  await proxy.waitForRequests(1)
  t.equal(upstream.requests.length, 1, 'exactly one attempt reached the upstream')

  // Also on a reused connection, where a client library might be tempted to retry.
  const idem = await fetch(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', body: '{"model":"m"}' })
  t.equal(idem.status, 502)
  await idem.arrayBuffer()
  await proxy.waitForRequests(2)
  t.equal(upstream.requests.length, 2, 'one attempt per request')
})

t.test('hop-by-hop headers, and the ones Connection names, cross in neither direction', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(
      200,
      [
        ['content-type', 'application/json'],
        ['connection', 'X-Upstream-Secret, keep-alive'],
        ['x-upstream-secret', 'v'],
        ['keep-alive', 'timeout=5'],
        ['x-end-to-end', 'kept'],
      ].flat(),
    )
    res.end('{}')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const agent = new Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())
  const { res } = await new Promise<Awaited<ReturnType<typeof openRequest>>>((resolve, reject) => {
    import('node:http').then(({ request }) => {
      const req = request(
        `${proxy.url}/up/v1/chat/completions`,
        {
          method: 'POST',
          agent,
          headers: {
            connection: 'X-Secret, keep-alive',
            'x-secret': 'v',
            'keep-alive': 'timeout=5',
            te: 'trailers',
            'proxy-connection': 'keep-alive',
            'x-end-to-end': 'kept',
            'content-type': 'application/json',
          },
        },
        (res) => resolve({ res, req }),
      )
      req.on('error', reject)
      req.end('{"model":"m"}')
    }, reject)
  })
  await readAll(res)
  const seen = upstream.requests[0].rawHeaders.filter((_, i) => i % 2 === 0).map((h) => h.toLowerCase())
  t.notOk(seen.includes('x-secret'), 'a header named by Connection does not reach the upstream')
  t.notOk(seen.includes('keep-alive'))
  t.notOk(seen.includes('te'))
  t.notOk(seen.includes('proxy-connection'))
  t.ok(seen.includes('x-end-to-end'), 'end-to-end headers pass')
  t.notOk('x-upstream-secret' in res.headers, 'a response header named by Connection does not reach the client')
  t.notOk('keep-alive' in res.headers && res.headers['keep-alive'] === 'timeout=5', 'the upstream keep-alive parameters do not reach the client')
  t.equal(res.headers['x-end-to-end'], 'kept')
})
