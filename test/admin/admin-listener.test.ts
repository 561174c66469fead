import type { AddressInfo } from 'node:net'
import t from 'tap'
import pino from 'pino'
import { buildApp } from '../../src/app.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import { simRoute } from '../helpers/proxy.ts'

const TOKEN = 'admin-SECRET-token'

t.test('the admin listener binds its own interface and wants a bearer token for /metrics', async (t) => {
  const config = validateConfig({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.2', port: 0, token: TOKEN }, routes: [simRoute()] })
  const app = await buildApp(config, { logger: pino({ level: 'silent' }) })
  t.teardown(() => app.close())
  await app.listen({ host: config.server.host, port: config.server.port })
  await app.tokentap.admin.listen({ host: config.admin.host, port: config.admin.port })
  const admin = app.tokentap.admin.server.address() as AddressInfo
  const proxy = app.server.address() as AddressInfo
  t.equal(admin.address, '127.0.0.2', 'admin is bound to its own address')

  const base = `http://127.0.0.2:${admin.port}`
  const none = await fetch(`${base}/metrics`)
  t.equal(none.status, 401)
  t.equal(none.headers.get('www-authenticate'), 'Bearer')
  t.notMatch(await none.text(), /SECRET/, 'the 401 does not echo the token')
  const wrong = await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer admin-SECRET-tokex' } })
  t.equal(wrong.status, 401)
  await wrong.arrayBuffer()
  const short = await fetch(`${base}/metrics`, { headers: { authorization: `Basic ${TOKEN}` } })
  t.equal(short.status, 401, 'only the Bearer scheme')
  await short.arrayBuffer()
  const right = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(right.status, 200)
  t.match(await right.text(), /llm_requests_total/)
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'health checks need no token')
  t.equal((await fetch(`${base}/readyz`)).status, 200)

  await t.rejects(fetch(`http://127.0.0.1:${admin.port}/metrics`), 'nothing answers on the proxy interface at the admin port')
  const onProxy = await fetch(`http://127.0.0.1:${proxy.port}/metrics`)
  t.equal(onProxy.status, 404, 'the proxy listener does not serve /metrics')
  await onProxy.arrayBuffer()
})

t.test('without admin.token, /metrics is open', async (t) => {
  const config = validateConfig({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, routes: [simRoute()] })
  const app = await buildApp(config, { logger: pino({ level: 'silent' }) })
  t.teardown(() => app.close())
  await app.tokentap.admin.listen({ host: config.admin.host, port: 0 })
  const res = await fetch(`http://127.0.0.1:${(app.tokentap.admin.server.address() as AddressInfo).port}/metrics`)
  t.equal(res.status, 200)
  await res.arrayBuffer()
})
