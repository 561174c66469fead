import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import type { Socket } from 'node:net'
import t from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { SSE_HEADERS, chatBody, chatEvent, openRequest, waitFor } from '../helpers/faults.ts'

const openConnections = (server: import('node:http').Server): Promise<number> => new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))))

t.test('a client that goes away before the response headers aborts the upstream request and is counted cancelled', async (t) => {
  let upstreamClosedAt = 0
  const upstream = await startUpstream((_req, res) => {
    // Never answers: the proxy waits for headers.
    res.once('close', () => (upstreamClosedAt = performance.now()))
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const req = (await import('node:http')).request(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } })
  req.on('error', () => {})
  req.end(chatBody('gpt-4o'))
  await waitFor('the upstream to get the request', () => upstream.requests.length === 1)
  const goneAt = performance.now()
  req.destroy()

  await waitFor('the upstream request to close', () => upstreamClosedAt > 0)
  t.ok(upstreamClosedAt - goneAt < 2000, `upstream request closed ${Math.round(upstreamClosedAt - goneAt)} ms after the client left`)
  t.equal(upstream.aborted, 1, 'the upstream saw its request aborted')
  await waitFor('the upstream socket to be released', async () => (await openConnections(upstream.server)) === 0)

  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'cancelled')
  t.equal(line.status, 499, 'no status was sent: logged as 499 (client closed request)')
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'cancelled', model: 'gpt-4o', status_code: '499' }), 1)
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { outcome: 'cancelled' }), 1)
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
    'nothing left in flight',
  )
  t.equal(proxy.app.tokentap.active.size, 0)
})

t.test('a client that goes away after k chunks aborts the upstream and keeps the tokens and timings seen so far', async (t) => {
  let upstreamClosedAt = 0
  let sent = 0
  const upstream = await startUpstream((_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    const timer = setInterval(() => {
      sent++
      res.write(chatEvent(' the'))
    }, 20)
    res.once('close', () => {
      clearInterval(timer)
      upstreamClosedAt = performance.now()
    })
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const { res, req } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody('gpt-4o') })
  t.equal(res.statusCode, 200)
  const K = 3
  let seen = 0
  let goneAt = 0
  await new Promise<void>((resolve) => {
    res.on('data', (c: Buffer) => {
      seen += c.toString().split('data: ').length - 1
      if (seen >= K && goneAt === 0) {
        goneAt = performance.now()
        req.destroy()
        resolve()
      }
    })
  })
  res.on('error', () => {})

  await waitFor('the upstream request to close', () => upstreamClosedAt > 0)
  t.ok(upstreamClosedAt - goneAt < 2000, `upstream request closed ${Math.round(upstreamClosedAt - goneAt)} ms after the client left`)
  t.equal(upstream.aborted, 1)
  await waitFor('the upstream socket to be released', async () => (await openConnections(upstream.server)) === 0)

  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'cancelled')
  t.equal(line.status, 200, 'the status the client got')
  t.ok((line.chunks as number) >= K && (line.chunks as number) <= sent, `chunks seen so far (${line.chunks}) between ${K} and ${sent}`)
  const m = await proxy.scrape()
  const labels = { model: 'gpt-4o', outcome: 'cancelled' }
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, status_code: '200' }), 1)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', { model: 'gpt-4o' }), 1, 'the first token was real: its TTFT is recorded')
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', { model: 'gpt-4o' }), (line.chunks as number) - 1, 'the gaps seen so far are recorded')
  t.equal(sumOf(m, 'llm_output_tokens_total', { model: 'gpt-4o', source: 'estimate' }), line.chunks, 'tokens seen so far are counted')
  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count'), 0, 'no TPOT for a cancelled request')
  t.equal(sumOf(m, 'llm_output_tokens_per_second_count'), 0, 'no TPS for a cancelled request')
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
  )
})

t.test('clients that leave before the response headers leave no upstream connection open, even with a long keep-alive', async (t) => {
  // undici re-queues an aborted in-flight request and opens a connection for it that serves
  // nothing (nodejs/undici#5845); the Agent must close it at once, not keep it idle for the
  // keep-alive time: each would be one more TLS handshake with the provider.
  const upstream = await startUpstream(() => {
    // Never answers: each client leaves while the proxy waits for headers.
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { keep_alive_timeout_ms: 600_000 } })
  t.teardown(() => proxy.close())
  const http = await import('node:http')
  const N = 20
  for (let i = 0; i < N; i++) {
    const req = http.request(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } })
    req.on('error', () => {})
    req.end(chatBody('gpt-4o'))
    await waitFor('the upstream to get the request', () => upstream.requests.length === i + 1)
    req.destroy()
  }
  await proxy.waitForRequests(N)
  // Far below the 600 s keep-alive: a connection kept idle would still be open.
  await waitFor('every upstream connection to be closed', async () => (await openConnections(upstream.server)) === 0, 20_000)
  t.equal(upstream.aborted, N, 'each upstream request was aborted')
  t.pass(`no upstream connection is left open after ${N} clients left before the headers`)
})

t.test('a hundred clients that leave before the headers while another request is in flight leave only that request’s connection open', async (t) => {
  // undici reconnects for each aborted request (nodejs/undici#5845) and its Agent closed that
  // connection only when no other connection to the origin was up: beside one request in flight,
  // each abort left an idle connection that no keep-alive timer reaps.
  const upstream = await startUpstream(() => {
    // Never answers: the request in flight stays, the others' clients leave while waiting.
  })
  t.teardown(() => upstream.close())
  // The proxy's connections to this upstream as undici makes them (by port: an earlier test's
  // agent may still be settling a connect to its own).
  const port = new URL(upstream.url).port
  const ours = (message: unknown): boolean => String((message as { connectParams: { port: string | number } }).connectParams.port) === port
  const attempts = { made: 0, settled: 0 }
  const open = new Set<Socket>()
  const onAttempt = (message: unknown): void => {
    if (ours(message)) attempts.made++
  }
  const onFailed = (message: unknown): void => {
    if (ours(message)) attempts.settled++
  }
  const onConnected = (message: unknown): void => {
    if (!ours(message)) return
    attempts.settled++
    const socket = (message as { socket: Socket }).socket
    open.add(socket)
    socket.once('close', () => open.delete(socket))
  }
  subscribe('undici:client:beforeConnect', onAttempt)
  subscribe('undici:client:connectError', onFailed)
  subscribe('undici:client:connected', onConnected)
  t.teardown(() => {
    unsubscribe('undici:client:beforeConnect', onAttempt)
    unsubscribe('undici:client:connectError', onFailed)
    unsubscribe('undici:client:connected', onConnected)
  })
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { keep_alive_timeout_ms: 600_000 } })
  t.teardown(() => proxy.close())
  const http = await import('node:http')
  const send = () => {
    const req = http.request(`${proxy.url}/up/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } })
    req.on('error', () => {})
    req.end(chatBody('gpt-4o'))
    return req
  }
  const inFlight = send()
  t.teardown(() => inFlight.destroy())
  await waitFor('the upstream to get the request in flight', () => upstream.requests.length === 1)
  const N = 100
  const leaving = Array.from({ length: N }, send)
  await waitFor('the upstream to get every request', () => upstream.requests.length === N + 1, 20_000)
  for (const req of leaving) req.destroy()
  await proxy.waitForRequests(N)
  // An aborted connection's close starts undici's reconnect in the same call: once every socket
  // but one has closed and no connect is pending, nothing more is coming.
  await waitFor('the proxy to hold one upstream connection, with no connect pending', () => open.size === 1 && attempts.made === attempts.settled, 20_000).catch((err: Error) => {
    throw new Error(`${err.message}: ${open.size} open, ${attempts.made} connects made, ${attempts.settled} settled`)
  })
  await waitFor('the upstream to see the same', async () => (await openConnections(upstream.server)) === 1, 20_000)
  t.equal(upstream.aborted, N, 'each upstream request was aborted')
  t.equal(open.size, 1, `only the request in flight holds a connection (${attempts.made} were opened)`)
})
