import { createServer } from 'node:net'
import type { AddressInfo, Server } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { listenError } from '../src/startup.ts'
import { startServerProcess } from './helpers/server-process.ts'

/** The real service process: what it says when it starts, and when a port is taken. */

const SIM_ROUTE = { prefix: '/sim', simulator: {} }

/** A port some other process already listens on. */
async function takenPort(t: Test): Promise<number> {
  const server: Server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return (server.address() as AddressInfo).port
}

t.test('start-up prints one human line with the proxy, metrics and live-page URLs, and they answer', async (t) => {
  const server = startServerProcess({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, routes: [SIM_ROUTE] })
  t.teardown(() => server.kill())
  const listening = await server.waitForLog((l) => l.msg === 'tokentap listening')
  // stdout and stderr are two pipes: the human line may come in after the JSON one.
  while (!server.stderr().includes('\n')) await new Promise((resolve) => server.child.stderr?.once('data', resolve))
  const lines = server.stderr().split('\n')
  t.equal(lines.length, 2, 'one line (and its newline) on stderr')
  const m = /^tokentap: proxy (http:\/\/127\.0\.0\.1:\d+\/) · metrics (http:\/\/127\.0\.0\.1:(\d+)\/metrics) · live page (http:\/\/127\.0\.0\.1:(\d+)\/)$/.exec(lines[0])
  t.ok(m, lines[0])
  if (m === null) return
  t.equal(m[3], m[5], 'metrics and the live page are on the admin listener')
  t.equal(listening.live, m[4], 'the JSON log line carries the same URLs')
  t.equal(listening.metrics, m[2])
  t.notOk(
    server.logs.some((l) => typeof l.msg === 'string' && l.msg.startsWith('Server listening')),
    "Fastify's own listening lines are not written",
  )
  const live = await fetch(m[4])
  t.equal(live.status, 200)
  t.match(live.headers.get('content-type'), /text\/html/)
  await live.arrayBuffer()
  const metrics = await fetch(m[2])
  t.equal(metrics.status, 200)
  await metrics.arrayBuffer()
  const proxied = await fetch(`${m[1]}sim/v1/models`)
  await proxied.arrayBuffer()
  t.ok(proxied.status < 500, 'the proxy URL answers')
})

t.test('a taken proxy port is one line naming the listener, the address and the setting and flag to change, and exit 1', async (t) => {
  const port = await takenPort(t)
  const server = startServerProcess({ server: { host: '127.0.0.1', port }, admin: { host: '127.0.0.1', port: 0 }, routes: [SIM_ROUTE] })
  t.teardown(() => server.kill())
  t.equal(await server.exited, 1)
  t.equal(
    server.stderr(),
    `tokentap: the proxy listener cannot listen on 127.0.0.1:${port}: the address is already in use (another process listens there); set 'server.port' in the config, --port N or TOKENTAP_PORT\n`,
  )
})

t.test('a taken admin port names the admin listener and its own setting and flag, and exits 1', async (t) => {
  const port = await takenPort(t)
  const server = startServerProcess({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port }, routes: [SIM_ROUTE] })
  t.teardown(() => server.kill())
  t.equal(await server.exited, 1)
  t.equal(
    server.stderr(),
    `tokentap: the admin listener (metrics, live page) cannot listen on 127.0.0.1:${port}: the address is already in use (another process listens there); set 'admin.port' in the config, --admin-port N or TOKENTAP_ADMIN_PORT\n`,
  )
})

t.test('each bind failure names its reason and what changes it; any other error passes through', async (t) => {
  const err = (code: string): Error => Object.assign(new Error(code), { code })
  t.equal(
    (listenError(err('EACCES'), 'proxy', '0.0.0.0', 80) as Error).message,
    "the proxy listener cannot listen on 0.0.0.0:80: permission denied (ports below 1024 need privileges); set 'server.port' in the config, --port N or TOKENTAP_PORT",
  )
  t.equal(
    (listenError(err('EADDRNOTAVAIL'), 'admin', '2001:db8::1', 9464) as Error).message,
    "the admin listener (metrics, live page) cannot listen on [2001:db8::1]:9464: the host is not an address of this machine; set 'admin.host' in the config",
  )
  const other = err('EMFILE')
  t.equal(listenError(other, 'proxy', '127.0.0.1', 8080), other, 'not a bind failure: unchanged')
})
