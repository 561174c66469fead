import t from 'tap'
import { TokentapError } from '../../src/errors.ts'
import { originForm } from '../../src/proxy/request-target.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { portOf, rawExchange } from '../helpers/raw-socket.ts'

const code = (v: string | TokentapError): string => (v instanceof TokentapError ? v.code : `path ${v}`)

t.test('an origin-form target is returned as it is, query included', async (t) => {
  for (const target of ['/', '/v1/models', '/v1/x?key=1&b=%20', '/a//b/../c', '/u%70/v1', '//evil.example/x']) t.equal(originForm(target), target, target)
})

t.test('a fragment is cut off and never forwarded', async (t) => {
  t.equal(originForm('/v1/x#/../../upb'), '/v1/x')
  t.equal(originForm('/v1/x?q=1#frag'), '/v1/x?q=1')
  t.equal(originForm('/#'), '/')
  t.equal(originForm('http://h/v1/x#/../y'), '/v1/x')
})

t.test('an absolute-form target is reduced to its path and query', async (t) => {
  t.equal(originForm('http://evil.example/vllm/v1/models'), '/vllm/v1/models')
  t.equal(originForm('HTTPS://evil.example:8443/v1/chat/completions?x=1'), '/v1/chat/completions?x=1')
  t.equal(originForm('http://evil.example'), '/')
  t.equal(originForm('http://evil.example?q=1'), '/?q=1')
  t.equal(originForm('http://[::1]:80/p'), '/p')
})

t.test('targets that are neither origin-form nor absolute-form are refused with 400', async (t) => {
  for (const target of [undefined, '', '*', 'evil.example:443', 'ftp://h/x', 'http:/x', 'http:///x', 'http://user@evil.example/x', 'v1/models', 'javascript:alert(1)']) {
    const r = originForm(target)
    t.equal(code(r), 'TOKENTAP_ERR_BAD_TARGET', String(target))
    if (r instanceof TokentapError) {
      t.equal(r.statusCode, 400)
      if (target !== undefined && target.length > 2) t.notOk(r.message.includes(target), 'the message does not echo the target')
    }
  }
})

t.test('through the proxy, an absolute-form target reaches the upstream as the path after the prefix', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({
    routes: [
      { prefix: '/vllm', upstream: `${upstream.url}/base` },
      { prefix: '/other', upstream: upstream.url },
    ],
  })
  t.teardown(() => proxy.close())
  const port = portOf(proxy.url)
  const send = (target: string): Promise<string> => rawExchange(port, `GET ${target} HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n`).then((b) => b.toString('latin1'))

  t.match(await send('http://evil.example/vllm/v1/models'), /^HTTP\/1\.1 200 /)
  t.match(await send('http://evil.example/other/v1/models?a=1'), /^HTTP\/1\.1 200 /)
  t.match(await send('/vllm/v1/x#/../../upb'), /^HTTP\/1\.1 200 /)
  // Fastify's router cannot decode this one; the answer is the proxy's 400, not an echo of the target.
  const refused = await send('http://evil.example/vllm/v1/y#frag?key=AIzaSECRET')
  t.match(refused, /^HTTP\/1\.1 400 /)
  t.match(refused, /"code":"TOKENTAP_ERR_BAD_TARGET"/)
  t.notOk(refused.includes('evil') || refused.includes('AIza'))
  t.same(
    upstream.requests.map((r) => r.url),
    ['/base/v1/models', '/v1/models?a=1', '/base/v1/x'],
  )
  for (const r of upstream.requests) t.notOk(r.url.includes('evil') || r.url.includes('#'), 'no client authority or fragment upstream')
})

t.test("an unmatched path answers the proxy's own 404 JSON error without echoing the URL or query", async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/gemini', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  for (const [method, path] of [
    ['GET', '/v1beta/models?key=AIzaSyDUMMYSECRET'],
    ['POST', '/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse&key=AIzaSyDUMMYSECRET'],
    ['PROPFIND', '/gemini/v1?key=AIzaSyDUMMYSECRET'],
  ] as const) {
    const res = await fetch(`${proxy.url}${path}`, { method })
    t.equal(res.status, 404, `${method} ${path}`)
    t.match(res.headers.get('content-type'), /^application\/json/)
    const text = await res.text()
    t.same(JSON.parse(text), { error: { message: 'no route for this method and path', type: 'proxy_error', code: 'TOKENTAP_ERR_NOT_FOUND' } })
    t.notOk(text.includes('AIza') || text.includes('v1beta') || text.includes('key='), 'neither the URL nor the query comes back')
  }
  t.equal(upstream.requests.length, 0)
  // Absolute-form on no route: the same answer, the authority not echoed either.
  const raw = (await rawExchange(portOf(proxy.url), 'GET http://evil.example/v1beta/models?key=AIzaSyDUMMYSECRET HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).toString('latin1')
  t.match(raw, /^HTTP\/1\.1 404 /)
  t.notOk(raw.includes('AIza') || raw.includes('evil'))
})
