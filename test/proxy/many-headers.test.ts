import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { portOf, rawExchange } from '../helpers/raw-socket.ts'

const request = (headerLines: string): string => `GET /up/v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${headerLines}\r\n`

t.test('a request with 1,500 headers reaches the upstream with every one of them, in order', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.end('ok')
  })
  // The test upstream is a Node server too: without this it would keep only ~1,000 of them itself.
  upstream.server.maxHeadersCount = 0
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  let lines = ''
  for (let i = 0; i < 1500; i++) lines += `h${i}:${i % 10}\r\n`
  const res = (await rawExchange(portOf(proxy.url), request(lines))).toString('latin1')
  t.match(res, /^HTTP\/1\.1 200 /)
  t.equal(upstream.requests.length, 1)
  const got = upstream.requests[0].rawHeaders
  const names: string[] = []
  for (let i = 0; i < got.length; i += 2) if (/^h\d+$/.test(got[i])) names.push(`${got[i]}:${got[i + 1]}`)
  t.equal(names.length, 1500, 'all 1,500 arrived')
  t.same(
    names,
    Array.from({ length: 1500 }, (_, i) => `h${i}:${i % 10}`),
    'names, values and order intact',
  )
})

t.test('headers larger than the proxy takes are refused with 431 before anything goes upstream', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  let lines = ''
  for (let i = 0; i < 1500; i++) lines += `x-some-longer-header-${i}: secret-${i}\r\n`
  const res = (await rawExchange(portOf(proxy.url), request(lines))).toString('latin1')
  t.match(res, /^HTTP\/1\.1 431 /)
  t.notOk(res.includes('secret-'), 'no header comes back')
  t.equal(upstream.requests.length, 0)
})
