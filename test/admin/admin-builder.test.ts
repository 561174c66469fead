import t from 'tap'
import pino from 'pino'
import { ADMIN_ROUTES, buildAdmin } from '../../src/admin/admin.ts'
import type { AdminState } from '../../src/admin/admin.ts'
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

function state(registry: MetricsSource, token?: string): AdminState {
  const config = validateConfig({ admin: token === undefined ? {} : { token }, routes: [simRoute()] })
  return { config, logger: pino({ level: 'silent' }), registry, draining: false, now: () => 0 }
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
