import t from 'tap'
import { escapesRoot } from '../../src/proxy/route-path.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { portOf, rawExchange } from '../helpers/raw-socket.ts'

// A route's base path confines the client: dot-segments in any spelling that would climb above
// it are refused with 400 before anything goes upstream; paths that stay inside pass unchanged.

const ESCAPES = [
  '/prefix/../admin',
  '/prefix/%2e%2e/admin',
  '/prefix/%2E%2E/admin',
  '/prefix/..%2fadmin',
  '/prefix/.%2e/admin',
  '/prefix/./../admin',
  '/prefix/a/../../admin',
  '/prefix/..\\admin',
  '/prefix/%2e%2e%5cadmin',
  '/prefix/..',
]

t.test('every spelling of a dot-segment that leaves the base path is answered 400 and never reaches the upstream', async (t) => {
  const seen: string[] = []
  const upstream = await startUpstream((req, res) => {
    seen.push(req.url ?? '')
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/prefix', upstream: `${upstream.url}/basepath` }] })
  t.teardown(() => proxy.close())
  for (const path of ESCAPES) {
    const answer = (await rawExchange(portOf(proxy.url), `GET ${path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`)).toString('latin1')
    // Node or Fastify may refuse some spellings first (400 too); none may reach the upstream.
    t.match(answer, /^HTTP\/1\.1 400 /, `${path}: 400`)
  }
  t.same(seen, [], 'the upstream saw none of them')
  // Raw: fetch would resolve the dot-segments itself.
  const ok = (await rawExchange(portOf(proxy.url), 'GET /prefix/v1/a/../models?x=.. HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')).toString('latin1')
  t.match(ok, /^HTTP\/1\.1 200 /, 'a dot-segment that stays inside the base path passes')
  t.same(seen, ['/basepath/v1/a/../models?x=..'], 'unchanged, as the client wrote it')
})

t.test('a WebSocket upgrade whose path leaves the base path is answered 400 too', async (t) => {
  const upstream = await startUpstream((_req, res) => {
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/prefix', upstream: `${upstream.url}/basepath` }] })
  t.teardown(() => proxy.close())
  const answer = (
    await rawExchange(
      portOf(proxy.url),
      'GET /prefix/%2e%2e/v1/realtime HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    )
  ).toString('latin1')
  t.match(answer, /^HTTP\/1\.1 400 /)
})

t.test('two Host header fields are answered 400 (RFC 9112 §3.2)', async (t) => {
  let reached = 0
  const upstream = await startUpstream((_req, res) => {
    reached++
    res.end('ok')
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  const answer = (await rawExchange(portOf(proxy.url), 'GET /up/v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n')).toString('latin1')
  t.match(answer, /^HTTP\/1\.1 400 /)
  t.equal(reached, 0)
})

t.test('escapesRoot resolves dot-segments as RFC 3986 §5.2.4 does, in every spelling', async (t) => {
  for (const p of ['/..', '/a/../..', '/%2e%2e', '/.%2E/x', '/..%2Fx', '/./../x', '/a/./b/../../..', '/..\\x']) t.ok(escapesRoot(p), p)
  for (const p of ['/', '/v1/chat/completions', '/a/..', '/a/b/../../c', '/..a', '/a..', '/.well-known/x', '/%2e%2ex', '/x.y/z']) t.notOk(escapesRoot(p), p)
})
