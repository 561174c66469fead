import t from 'tap'
import pino from 'pino'
import { ADMIN_ROUTES, buildAdmin } from '../../src/admin/admin.ts'
import type { AdminSource } from '../../src/admin/source.ts'
import { LiveStore } from '../../src/admin/live/live-store.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import type { MetricsSource } from '../../src/metrics/prometheus/source.ts'
import { simRoute } from '../helpers/proxy.ts'

/** A source rendered whole: Prometheus text only, in one batch (what an embedding app may hand the admin). */
function wholeTextSource(render: () => Promise<string>): MetricsSource {
  return {
    openMetrics: false,
    async *exposition() {
      yield [Buffer.from(await render())]
    },
  }
}

function state(metrics: MetricsSource, token?: string): AdminSource {
  const config = validateConfig({ admin: token === undefined ? {} : { token }, routes: [simRoute()] })
  return { config, logger: pino({ level: 'silent' }), metrics, draining: false }
}

t.test('a route group added to the admin listener is behind the token like the others', async (t) => {
  const admin = buildAdmin(
    state(
      wholeTextSource(async () => 'x_total 1\n'),
      'tok',
    ),
    [...ADMIN_ROUTES, (app) => app.get('/extra', async () => ({ extra: true }))],
  )
  t.teardown(() => admin.close())
  const refused = await admin.inject({ url: '/extra' })
  t.equal(refused.statusCode, 401)
  t.same(refused.json(), { error: 'a bearer token is required for /extra' })
  t.equal((await admin.inject({ url: '/extra', headers: { authorization: 'Bearer tok' } })).json().extra, true)
  t.equal((await admin.inject({ url: '/metrics?x=1' })).statusCode, 401, 'a query string does not open a route')
  t.equal((await admin.inject({ url: '/healthz' })).statusCode, 200, 'health checks stay open')
  t.equal((await admin.inject({ url: '/readyz' })).statusCode, 200)
  t.notMatch((await admin.inject({ url: '/nope-SECRET' })).body, /SECRET/, 'an unknown path is not echoed')
})

t.test('a source that cannot write OpenMetrics answers Prometheus text whatever the scraper asks', async (t) => {
  const admin = buildAdmin(state(wholeTextSource(async () => '# TYPE x_total counter\nx_total 1\n')))
  t.teardown(() => admin.close())
  const res = await admin.inject({ url: '/metrics', headers: { accept: 'application/openmetrics-text; version=1.0.0' } })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  t.equal(res.body, '# TYPE x_total counter\nx_total 1\n')
})

t.test('a source that fails before writing anything answers 503', async (t) => {
  const admin = buildAdmin(
    state(
      wholeTextSource(async () => {
        throw new Error('worker 1 did not answer')
      }),
    ),
  )
  t.teardown(() => admin.close())
  const res = await admin.inject({ url: '/metrics' })
  t.equal(res.statusCode, 503)
  t.same(res.json(), { error: 'the scrape failed' })
})

t.test('/debug/streams says 501 where this process runs no streams', async (t) => {
  const admin = buildAdmin(state(wholeTextSource(async () => '')))
  t.teardown(() => admin.close())
  t.equal((await admin.inject({ url: '/debug/streams' })).statusCode, 501)
})

t.test('the routes answer from whatever admin source they are given: its lookups, its 404 scope, its streams', async (t) => {
  const asked: string[] = []
  const streams = { in_flight: 3, shown: 0, omitted: 3, streams: [] }
  const admin = buildAdmin({
    ...state(wholeTextSource(async () => '')),
    live: {
      store: new LiveStore({ recentRequests: 0, stallSeconds: 1 }),
      active: new Set(),
      inFlight: () => 3,
      now: () => 0,
      watch: () => undefined,
      lookup: async (id) => {
        asked.push(id)
        return id === 'kept' ? { request_id: 'kept', from: 'the source' } : null
      },
      searched: 'the source’s last 7',
    },
    streams: async () => streams,
  })
  t.teardown(() => admin.close())
  const found = await admin.inject({ url: '/debug/requests/kept' })
  t.equal(found.statusCode, 200)
  t.same(found.json(), { request_id: 'kept', from: 'the source' }, 'the source’s view as it gave it')
  const missing = await admin.inject({ url: '/debug/requests/gone' })
  t.equal(missing.statusCode, 404)
  t.same(missing.json(), { error: "no finished request with id 'gone' among the source’s last 7", request_id: 'gone' }, 'the 404 names what the source searched')
  t.same(asked, ['kept', 'gone'], 'each lookup asked the source once')
  t.same((await admin.inject({ url: '/debug/streams' })).json(), streams, '/debug/streams is the source’s snapshot')
})
