import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { SSE_HEADERS, chatBody, chatEvent, readAll, openRequest, waitFor } from '../helpers/faults.ts'
import { defined } from '../helpers/defined.ts'

/** Reads a fetch body to its end; resolves 'end' or the error's message. */
async function drain(res: Response, onText?: (text: string) => void): Promise<{ text: string; outcome: 'end' | 'broken' }> {
  const reader = defined(res.body, 'a response body').getReader()
  let text = ''
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return { text, outcome: 'end' }
      text += Buffer.from(value).toString()
      onText?.(text)
    }
  } catch {
    return { text, outcome: 'broken' }
  }
}

const post = (url: string, model = 'gpt-4o'): Promise<Response> => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody(model) })

t.test('an upstream reset mid-stream breaks the client stream and is counted as an error', async (t) => {
  // The upstream writes each event once the client has the one before, and resets once the
  // client has both: no bytes can be in flight when the reset comes, whatever the machine's load.
  let clientHas = ''
  let wake = (): void => {}
  const clientGot = async (text: string): Promise<void> => {
    while (!clientHas.endsWith(text)) await new Promise<void>((r) => (wake = r))
  }
  const upstream = await startUpstream(async (_req, res) => {
    res.writeHead(200, SSE_HEADERS)
    res.write(chatEvent(' the'))
    await clientGot(chatEvent(' the'))
    res.write(chatEvent(' of'))
    await clientGot(chatEvent(' of'))
    res.socket?.resetAndDestroy()
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const res = await post(`${proxy.url}/up/v1/chat/completions`)
  t.equal(res.status, 200)
  const { text, outcome } = await drain(res, (got) => {
    clientHas = got
    wake()
  })
  t.equal(outcome, 'broken', 'the client body reader rejects: no clean end')
  t.notMatch(text, /\[DONE\]/, 'no invented [DONE]')
  t.equal(text, chatEvent(' the') + chatEvent(' of'), 'every byte before the reset reached the client')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.chunks, 2)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '200', model: 'gpt-4o' }), 1)
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count'), 1, 'the content that arrived is still timed')
  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count'), 0)
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
  )
})

/** A raw TCP upstream that writes `head` + `body` then closes cleanly (FIN): a truncated response. */
async function truncatingUpstream(response: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((socket) => {
    socket.once('data', () => {
      socket.write(response)
      setTimeout(() => socket.end(), 30)
    })
    socket.on('error', () => {})
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((r) => server.close(() => r())) }
}

t.test('a truncated chunked body breaks the client stream and is counted as an error', async (t) => {
  const event = chatEvent(' the')
  const hex = Buffer.byteLength(event).toString(16)
  // One whole chunk, then a chunk that announces 0x100 bytes but carries 10, then FIN.
  const upstream = await truncatingUpstream(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${hex}\r\n${event}\r\n100\r\ndata: {"id\r\n`)
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const res = await post(`${proxy.url}/up/v1/chat/completions`)
  t.equal(res.status, 200)
  const { text, outcome } = await drain(res)
  t.equal(outcome, 'broken')
  t.ok(text.startsWith(event), 'the complete event reached the client')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(sumOf(await proxy.scrape(), 'llm_requests_total', { outcome: 'error', status_code: '200' }), 1)
})

t.test('a body shorter than its Content-Length breaks the client stream and is counted as an error', async (t) => {
  const upstream = await truncatingUpstream('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"id":"x","choices":[')
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())

  const { res } = await openRequest(`${proxy.url}/up/v1/chat/completions`, { headers: { 'content-type': 'application/json' }, body: chatBody() })
  t.equal(res.statusCode, 200)
  t.equal(res.headers['content-length'], '1000', 'the declared length passes through')
  await t.rejects(readAll(res), 'the client sees a broken response, not a short one')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
})

t.test('a provider error event inside a 200 stream is counted as an error', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test', maxRetries: 0 })
  const stream = await client.chat.completions.create(
    { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream: true },
    simPlan({
      ttft_ms: 10,
      chunks: [
        [10, 1],
        [10, 1],
        [10, 1],
      ],
      error_after: 2,
    }),
  )
  let text = ''
  await t.rejects(async () => {
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? ''
  }, 'the SDK surfaces the provider error')
  t.equal(text.split(' ').length - 1, 2, 'the tokens before the error reached the client')
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.match(line.error, /sim_500/)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '200', model: 'gpt-4o' }), 1)
  t.equal(sumOf(m, 'llm_time_per_output_token_seconds_count'), 0)
})

t.test('a simulated upstream reset reaches the SDK as an error and is counted', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test', maxRetries: 0 })
  const stream = await client.chat.completions.create(
    { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream: true },
    simPlan({
      ttft_ms: 10,
      chunks: [
        [10, 1],
        [10, 1],
        [10, 1],
      ],
      reset_after: 2,
    }),
  )
  await t.rejects(async () => {
    for await (const _ of stream);
  })
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
})

t.test('an unreachable upstream answers 502 with a JSON error the OpenAI SDK shows', async (t) => {
  // A port that was just free: nothing listens there.
  const probe = createServer()
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r))
  const port = (probe.address() as AddressInfo).port
  await new Promise<void>((r) => probe.close(() => r()))
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: `http://127.0.0.1:${port}` }] })
  t.teardown(() => proxy.close())

  const res = await post(`${proxy.url}/up/v1/chat/completions`)
  t.equal(res.status, 502)
  t.match(res.headers.get('content-type'), /application\/json/)
  const body = (await res.json()) as { error: Record<string, unknown> }
  t.same(Object.keys(body.error).sort(), ['code', 'message', 'type'])
  t.equal(body.error.type, 'proxy_error')
  t.equal(body.error.code, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  t.match(body.error.message, /ECONNREFUSED/)

  const client = new OpenAI({ baseURL: `${proxy.url}/up/v1`, apiKey: 'sk-test', maxRetries: 0 })
  const err = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }).then(
    () => undefined,
    (e: unknown) => e,
  )
  t.ok(err instanceof OpenAI.APIError, 'the SDK raises an APIError')
  t.equal((err as InstanceType<typeof OpenAI.APIError>).status, 502)
  t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  t.equal((err as InstanceType<typeof OpenAI.APIError>).type, 'proxy_error')

  await proxy.waitForRequests(2)
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_requests_total', { outcome: 'error', status_code: '502' }), 2)
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
  )
})

t.test('an upstream that sends no headers in time answers 504 with a JSON error the OpenAI SDK shows', async (t) => {
  const upstream = await startUpstream(() => {
    // stalls forever
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }], upstream: { headers_timeout_ms: 200 } })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/up/v1`, apiKey: 'sk-test', maxRetries: 0 })
  const started = performance.now()
  const err = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream: true }).then(
    () => undefined,
    (e: unknown) => e,
  )
  t.ok(performance.now() - started >= 190, 'not before the headers timeout')
  t.ok(err instanceof OpenAI.APIError)
  t.equal((err as InstanceType<typeof OpenAI.APIError>).status, 504)
  t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'TOKENTAP_ERR_UPSTREAM_HEADERS_TIMEOUT')
  await waitFor('the upstream request to be aborted', () => upstream.aborted === 1)
  const [line] = await proxy.waitForRequests(1)
  t.equal(line.outcome, 'error')
  t.equal(line.status, 504)
})

t.test('an https upstream that accepts the connection but never completes the TLS handshake is cut at the connect timeout: 502, the connect code, the socket closed', async (t) => {
  // A TCP peer that never says a word: the TLS handshake cannot finish.
  let accepted = 0
  let closed = 0
  const silent = createServer((socket) => {
    accepted++
    socket.on('error', () => {})
    socket.on('close', () => closed++)
    // Read (and ignore) the ClientHello, so the peer's close is seen.
    socket.resume()
  })
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => silent.close(() => r())))
  const port = (silent.address() as AddressInfo).port
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: `https://127.0.0.1:${port}` }], upstream: { connect_timeout_ms: 300 } })
  t.teardown(() => proxy.close())
  const res = await post(`${proxy.url}/up/v1/chat/completions`)
  t.equal(res.status, 502)
  const body = (await res.json()) as { error: { code: string; message: string } }
  t.equal(body.error.code, 'TOKENTAP_ERR_UPSTREAM_CONNECT')
  t.match(body.error.message, /UND_ERR_CONNECT_TIMEOUT/)
  await waitFor('the silent connection to close', () => closed === accepted && accepted > 0)
  const [line] = await proxy.waitForRequests(1)
  t.same([line.outcome, line.status, line.error], ['error', 502, 'TOKENTAP_ERR_UPSTREAM_CONNECT'])
})
