import t from 'tap'
import { validateConfig } from '../../src/config/load-config.ts'

const route = { prefix: '/a', upstream: 'http://x' }

t.test('the stall threshold, exemplars and OTel export have defaults and are validated', async (t) => {
  const c = validateConfig({ routes: [route] })
  t.equal(c.metrics.stall_seconds, 1)
  t.equal(c.metrics.exemplars, false)
  t.same(c.otel, { headers: {} }, 'no endpoint: no export; unset keys are left to the OTEL_ variables')
  t.equal(c.routes[0].slo, undefined)
  t.throws(() => validateConfig({ routes: [route], metrics: { stall_seconds: 0 } }), /metrics\.stall_seconds/)
  t.throws(() => validateConfig({ routes: [route], otel: { endpoint: 'collector:4318' } }), /otel\.endpoint/)
  t.throws(() => validateConfig({ routes: [route], otel: { headers: { a: 1 } } }), /otel\.headers/)
  t.throws(() => validateConfig({ routes: [route], otel: { protocol: 'grpc' } }), /otel\.protocol/)
  t.throws(() => validateConfig({ routes: [route], otel: { interval: 5 } }), /otel\.interval' is not a known setting/)
})

t.test('a route SLO needs at least one positive bound and nothing else', async (t) => {
  const c = validateConfig({ routes: [{ ...route, slo: { ttft_seconds: 2 } }] })
  t.same(c.routes[0].slo, { ttft_seconds: 2 })
  t.throws(() => validateConfig({ routes: [{ ...route, slo: {} }] }), /routes\[0\]\.slo/)
  t.throws(() => validateConfig({ routes: [{ ...route, slo: { ttft_seconds: -1 } }] }), /routes\[0\]\.slo\.ttft_seconds/)
  t.throws(() => validateConfig({ routes: [{ ...route, slo: { itl_p50_seconds: 1 } }] }), /routes\[0\]\.slo\.itl_p50_seconds' is not a known setting/)
})
