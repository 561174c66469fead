import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { openRequest, readAll } from '../helpers/faults.ts'

// Each credential a distinct value, so a leak names its source.
const SECRETS = {
  authorization: 'Bearer sk-SECRET-authorization',
  'x-api-key': 'SECRET-x-api-key',
  'api-key': 'SECRET-api-key',
  'x-goog-api-key': 'SECRET-x-goog-api-key',
  'proxy-authorization': 'Basic SECRET-proxy-authorization',
  cookie: 'session=SECRET-cookie',
} as const
const QUERY_KEY = 'SECRET-query-key'
const LEAK = /SECRET/

async function freePort(): Promise<number> {
  const probe = createServer()
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r))
  const port = (probe.address() as AddressInfo).port
  await new Promise<void>((r) => probe.close(() => r()))
  return port
}

t.test('credentials in headers and the key query parameter never reach logs, metrics or error bodies', async (t) => {
  const upstream = await startUpstream((req, res) => {
    if (req.url?.startsWith('/v1/stall')) return
    res.writeHead(req.url?.startsWith('/v1/fail') ? 500 : 200, { 'content-type': 'application/json', 'set-cookie': 'upstream=SECRET-set-cookie' })
    res.end('{"error":{"message":"nope"}}')
  })
  t.teardown(() => upstream.close())
  const dead = await freePort()
  const proxy = await startProxy({
    log: { level: 'trace' },
    // The limit applies to every request here, the healthy ones too: long enough that a loaded
    // machine (a process frozen for a few hundred ms) does not turn their answers into 504s.
    upstream: { headers_timeout_ms: 1000 },
    server: { host: '127.0.0.1', port: 0, body_limit_bytes: 1024 },
    routes: [{ prefix: '/up', upstream: upstream.url }, { prefix: '/dead', upstream: `http://127.0.0.1:${dead}` }, simRoute()],
  })
  t.teardown(() => proxy.close())

  const bodies: string[] = []
  const send = async (path: string, body = '{"model":"gpt-4o","stream":true,"messages":[]}'): Promise<number> => {
    const { res } = await openRequest(`${proxy.url}${path}?alt=sse&key=${QUERY_KEY}`, { headers: { ...SECRETS, 'content-type': 'application/json' }, body })
    const text = (await readAll(res)).toString()
    bodies.push(text)
    if (path.startsWith('/up/v1/chat') && res.statusCode === 200) t.equal(res.headers['set-cookie']?.[0], 'upstream=SECRET-set-cookie', 'set-cookie still reaches the client')
    return res.statusCode ?? 0
  }
  t.equal(await send('/dead/v1/chat/completions'), 502, 'connect failure')
  t.equal(await send('/up/v1/stall'), 504, 'headers timeout')
  t.equal(await send('/up/v1/fail'), 500, 'upstream error')
  t.equal(await send('/up/v1/chat/completions'), 200, 'upstream answer')
  t.equal(await send('/up/v1/chat/completions', 'x'.repeat(2048)), 413, 'body over the limit')
  t.equal(await send('/sim/v1/chat/completions'), 200, 'a whole stream')
  await proxy.waitForRequests(6)

  const errorBodies = bodies.filter((b) => b.includes('proxy_error'))
  t.equal(errorBodies.length, 3, 'three proxy errors were answered')
  for (const b of errorBodies) t.notMatch(b, LEAK, 'no secret in an error body')
  t.notMatch(JSON.stringify(proxy.logs), LEAK, 'no secret in any log line, at trace level')
  t.notMatch(await proxy.scrapeText(), LEAK, 'no secret in the scrape')
  const sent = upstream.requests.find((r) => r.url.startsWith('/v1/chat'))
  t.ok(sent?.rawHeaders.includes(SECRETS.authorization), 'credentials still reach the upstream: the proxy is transparent')
  t.match(sent?.url, /key=SECRET-query-key/)
})
