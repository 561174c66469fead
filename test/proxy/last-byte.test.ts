import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import type { Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import Fastify from 'fastify'
import httpProxy from '@fastify/http-proxy'
import pino from 'pino'
import t from 'tap'
import type { Test } from 'tap'
import tokentap from '../../src/plugin.ts'
import { tokentapReplyOptions } from '../../src/http-proxy.ts'
import { startProxy } from '../helpers/proxy.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import { Received, VirtualClock, near, playSteps, rawCall, startHeldUpstream } from '../helpers/virtual-time.ts'

// t_end is the last byte written to the client, not the response's `close`: the virtual clock
// jumps 5 s when Node reports the proxy's response finished (the `http.server.response.finish`
// channel, after the last write and before 'close'), and E2E does not move.

const SSE = 'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
const JUMP_MS = 5000

/** A held upstream answering one SSE event, then `[DONE]` and the end. */
async function sseUpstream(t: Test) {
  const upstream = await startHeldUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(SSE)
    res.end('data: [DONE]\n\n')
  })
  t.teardown(() => upstream.close())
  return upstream
}

/** Moves the clock JUMP_MS forward each time `server` reports a response finished. */
function jumpOnFinish(t: Test, clock: VirtualClock, server: () => Server): void {
  const onFinish = (message: unknown): void => {
    if ((message as { server: Server }).server === server()) clock.set(clock.now() + JUMP_MS)
  }
  subscribe('http.server.response.finish', onFinish)
  t.teardown(() => unsubscribe('http.server.response.finish', onFinish))
}

const BODY = JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] })

t.test('a route’s E2E ends at the last byte written: time after it, before the response closes, does not count', async (t) => {
  const clock = new VirtualClock(1000)
  const upstream = await sseUpstream(t)
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  jumpOnFinish(t, clock, () => proxy.app.server)
  const received = new Received()
  const call = rawCall(received, `${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: BODY })
  await playSteps(clock, upstream, received, { times: [40, 250] })
  t.equal((await call.done).status, 200)
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.e2e_ms, 250, 'the log line’s E2E: request to the last write')
  t.equal(clock.now(), 1000 + 250 + JUMP_MS, 'the clock did jump after the last write')
  const m = await proxy.scrape()
  t.ok(near(sumOf(m, 'llm_request_duration_seconds_sum', { route: '/up' }), 0.25), 'llm_request_duration_seconds: 250 ms')
})

t.test('an open stream’s response has no listener for its end until the upstream ends, and E2E still ends at the last byte', async (t) => {
  const clock = new VirtualClock(1000)
  const upstream = await sseUpstream(t)
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  jumpOnFinish(t, clock, () => proxy.app.server)
  const responses: ServerResponse[] = []
  const onStart = (message: unknown): void => {
    const { server, response } = message as { server: Server; response: ServerResponse }
    if (server === proxy.app.server) responses.push(response)
  }
  subscribe('http.server.request.start', onStart)
  t.teardown(() => unsubscribe('http.server.request.start', onStart))
  const received = new Received()
  const call = rawCall(received, `${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: BODY })
  const held = await playSteps(clock, upstream, received, { times: [40, 250], steps: 1 })
  t.equal(responses.length, 1)
  // Listeners held for a stream's whole life cost every open stream (bench/lab/heap-per-stream.ts).
  t.equal(responses[0].listenerCount('prefinish'), 0, 'mid-stream, nothing waits for prefinish')
  clock.set(1000 + 250)
  held.send()
  t.equal((await call.done).status, 200)
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.e2e_ms, 250, 'the log line’s E2E: request to the last write')
  t.equal(clock.now(), 1000 + 250 + JUMP_MS, 'the clock did jump after the last write')
})

t.test('the @fastify/http-proxy helper’s E2E ends at the last byte written too', async (t) => {
  const clock = new VirtualClock(1000)
  const upstream = await sseUpstream(t)
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString('utf8').split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>)
      cb()
    },
  })
  const app = Fastify({ loggerInstance: pino({ base: undefined }, sink) })
  await app.register(tokentap, { routes: [], now: clock.now })
  await app.register(httpProxy, { prefix: '/openai', upstream: upstream.url, replyOptions: tokentapReplyOptions(app, { prefix: '/openai', provider: 'openai' }) })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  jumpOnFinish(t, clock, () => app.server)
  const received = new Received()
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/openai/v1/chat/completions`
  const call = rawCall(received, url, { headers: { 'content-type': 'application/json' }, body: BODY })
  await playSteps(clock, upstream, received, { times: [40, 250] })
  t.equal((await call.done).status, 200)
  while (app.tokentap.active.size > 0) await new Promise((r) => setImmediate(r))
  const line = lines.find((l) => l.msg === 'request')
  t.equal(line?.e2e_ms, 250, 'the log line’s E2E: request to the last write')
  t.equal(clock.now(), 1000 + 250 + JUMP_MS, 'the clock did jump after the last write')
  const m = parseMetrics(await app.tokentap.registry.text())
  t.ok(near(sumOf(m, 'llm_request_duration_seconds_sum', { route: '/openai' }), 0.25), 'llm_request_duration_seconds: 250 ms')
})

t.test('a cancelled request still ends when the client left', async (t) => {
  const clock = new VirtualClock(1000)
  const upstream = await sseUpstream(t)
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url, provider: 'openai' }] }, { now: clock.now })
  t.teardown(() => proxy.close())
  const received = new Received()
  const call = rawCall(received, `${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: BODY })
  await playSteps(clock, upstream, received, { times: [40, 250], steps: 1 })
  clock.set(1000 + 700)
  call.abort()
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'cancelled')
  t.equal(line.e2e_ms, 700, 'E2E runs to when the proxy saw the client leave')
})
