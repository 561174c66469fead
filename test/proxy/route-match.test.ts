import Fastify from 'fastify'
import t from 'tap'
import { matchRoute, PROXY_METHODS, rawPrefixEnd } from '../../src/proxy/route-match.ts'
import type { ProxyRoute } from '../../src/proxy/route-match.ts'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'

const noop = (): void => {}
const routeFor = (base: string): ProxyRoute => ({ base, handle: noop })

/** Fastify with the routes app.ts registers for the same prefixes; answers with the matched base. */
async function fastifyRouter(bases: readonly string[]) {
  const app = Fastify({ routerOptions: { maxParamLength: 65_536, ignoreDuplicateSlashes: false } })
  for (const base of bases) {
    for (const url of base === '' ? ['/', '/*'] : [base, `${base}/*`]) {
      app.route({ method: [...PROXY_METHODS], url, exposeHeadRoute: false, handler: async (_req, reply) => reply.header('x-base', base).send('') })
    }
  }
  await app.ready()
  return app
}

const URLS = [
  '/sim', '/sim/', '/sim/v1/chat/completions', '/sim?x=1', '/sim/v1?stream=true&a=/b',
  '/simx', '/simx/v1', '/si', '/', '/other/v1', '/sim/sub/v1', '/sim/subx', '/SIM/v1',
  '//sim/v1', '/sim//v1', '/sim/v1/models/gemini-2.0-flash:streamGenerateContent?alt=sse',
  '/sim/%20space', '/sim/v1#frag',
]

t.test("the raw listener picks the route Fastify's router would pick, or leaves the request to Fastify", async (t) => {
  for (const bases of [['/sim', '/sim/sub', '/other'], ['', '/sim'], ['/a/b', '/a']]) {
    const app = await fastifyRouter(bases)
    t.teardown(() => app.close())
    const routes = bases.map(routeFor).sort((a, b) => b.base.length - a.base.length)
    for (const url of URLS) {
      for (const method of ['POST', 'GET']) {
        const ours = matchRoute(routes, method, url)
        const res = await app.inject({ method: method as 'POST', url })
        const theirs = res.statusCode === 404 ? undefined : res.headers['x-base']
        if (ours !== undefined) t.equal(ours.base, theirs, `${method} ${url} with routes ${bases.join(', ')}`)
        else t.equal(theirs, undefined, `${method} ${url}: left to Fastify, which matches no route either`)
      }
    }
  }
})

t.test('methods outside the proxied set are left to Fastify', async (t) => {
  const routes = [routeFor('/sim')]
  t.equal(matchRoute(routes, 'TRACE', '/sim/v1'), undefined)
  t.equal(matchRoute(routes, 'PROPFIND', '/sim/v1'), undefined)
  t.equal(matchRoute(routes, undefined, '/sim/v1'), undefined)
  t.equal(matchRoute(routes, 'POST', undefined), undefined)
  t.equal(matchRoute(routes, 'POST', 'http://example.com/sim/v1'), undefined, 'absolute-form target')
  t.equal(matchRoute(routes, 'DELETE', '/sim/v1')?.base, '/sim')
})

t.test('a request the raw listener takes and one Fastify routes reach the upstream the same way', async (t) => {
  const upstream = await startUpstream((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ url: req.url }))
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  // The first is matched by the raw listener; the second (percent-encoded prefix) goes through
  // Fastify's router, which decodes it before matching.
  const direct = await fetch(`${proxy.url}/up/v1/chat/completions?x=1`, { method: 'POST', body: '{"model":"m"}' })
  t.same(await direct.json(), { url: '/v1/chat/completions?x=1' })
  const viaFastify = await fetch(`${proxy.url}/u%70/v1/models`)
  t.same(await viaFastify.json(), { url: '/v1/models' }, 'the rest after the encoded prefix, as the client wrote it')
  await proxy.waitForRequests(2)
  t.equal(upstream.requests.length, 2)
  const unknown = await fetch(`${proxy.url}/nowhere`)
  t.equal(unknown.status, 404, 'paths no route owns get Fastify’s 404')
  await unknown.arrayBuffer()
})

t.test('the end of a percent-encoded prefix is found in the raw target', async (t) => {
  t.equal(rawPrefixEnd('/u%70/v1', '/up'), 5)
  t.equal(rawPrefixEnd('/%75%70?x', '/up'), 7)
  t.equal(rawPrefixEnd('/up/v1', '/up'), 3)
  t.equal(rawPrefixEnd('/anything', ''), 0)
  t.equal(rawPrefixEnd('/zz/v1', '/up'), 3, 'a target that does not spell the base falls back to its length')
})
