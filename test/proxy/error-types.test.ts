import { createServer } from 'node:net'
import type { AddressInfo, Socket } from 'node:net'
import t from 'tap'
import { sumOf } from '../helpers/prometheus.ts'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { portOf, rawExchange, startRawUpstream } from '../helpers/raw-socket.ts'
import { chatBody, chatEvent, openRequest, waitFor } from '../helpers/faults.ts'

/**
 * Each error class (the `error_type` label, record/error-type.ts) produced by a raw upstream
 * or an embedding app's hook, and the same class read on llm_requests_total, the request's log
 * line and /debug/requests/{id}.
 */

const SSE_HEAD = 'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n'
const answer = (status: string, contentType: string, body: string): string =>
  `HTTP/1.1 ${status}\r\ncontent-type: ${contentType}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
const anthropicStart =
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":9,"output_tokens":1}}}\n\n'
const anthropicError = (type: string): string => `event: error\ndata: {"type":"error","error":{"type":"${type}","message":"${type}"}}\n\n`

/** What the raw upstream does, by the request's `x-fault` header. */
const FAULTS: Record<string, (socket: Socket) => void> = {
  ok: (s) => s.end(`${SSE_HEAD}${chatEvent('hi')}data: [DONE]\n\n`),
  status429: (s) => s.end(answer('429 Too Many Requests', 'application/json', '{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}')),
  status529: (s) => s.end(answer('529 Site Overloaded', 'application/json', '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')),
  status500: (s) => s.end(answer('500 Internal Server Error', 'application/json', '{"error":{"message":"boom","type":"server_error"}}')),
  status401: (s) => s.end(answer('401 Unauthorized', 'application/json', '{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}')),
  anthropicOverloaded: (s) => s.end(`${SSE_HEAD}${anthropicStart}${anthropicError('overloaded_error')}`),
  anthropicRateLimited: (s) => s.end(`${SSE_HEAD}${anthropicStart}${anthropicError('rate_limit_error')}`),
  streamError: (s) => s.end(`${SSE_HEAD}${chatEvent('hi')}data: {"error":{"message":"the model crashed"}}\n\n`),
  reset: (s) => {
    s.write(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n`)
    const event = chatEvent('hi')
    s.write(`${Buffer.byteLength(event).toString(16)}\r\n${event}\r\n`, () => s.destroy())
  },
  // Head and one event, then nothing: the client leaves.
  hold: (s) => s.write(`${SSE_HEAD}${chatEvent('hi')}`),
  // Never a head: the proxy's headers timeout.
  hang: () => {},
}

interface Seen {
  readonly status: number
  readonly outcome: string
  readonly line: Record<string, unknown>
  readonly debug: Record<string, unknown>
  readonly counted: number
}

let proxy: RunningProxy
let requests = 0

t.before(async () => {
  const upstream = await startRawUpstream((socket, head) => {
    const fault = /\r\nx-fault: *([^\r]*)/i.exec(head)?.[1] ?? 'ok'
    FAULTS[fault](socket)
  })
  t.teardown(() => upstream.close())
  // A port nothing listens on: the connection is refused.
  const closed = createServer()
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r))
  const refusedPort = (closed.address() as AddressInfo).port
  await new Promise<void>((r) => closed.close(() => r()))
  proxy = await startProxy(
    {
      routes: [
        { prefix: '/openai', upstream: upstream.url, provider: 'openai' },
        { prefix: '/anthropic', upstream: upstream.url, provider: 'anthropic' },
        { prefix: '/nowhere', upstream: `http://127.0.0.1:${refusedPort}`, provider: 'openai' },
      ],
      upstream: { headers_timeout_ms: 300 },
      server: { client_body_timeout_ms: 300 },
    },
    {
      // The embedding app's own rule in front of the proxy (a rate limit, an API-key check).
      prepare: (app) =>
        app.addHook('onRequest', async (request, reply) => {
          if (request.headers['x-policy'] === 'refuse') await reply.code(429).header('content-type', 'application/json').send('{"error":"over your plan"}')
        }),
    },
  )
  t.teardown(() => proxy.close())
})

/** The class of the request with id `id` on the counter, its log line and /debug/requests/{id}. */
async function seen(id: string, route: string, errorType: string): Promise<Omit<Seen, 'status'>> {
  requests++
  const lines = await proxy.waitForRequests(requests)
  const line = lines.find((l) => l.request_id === id)
  if (line === undefined) throw new Error(`no log line for ${id}`)
  const debug = (await (await fetch(`${proxy.adminUrl}/debug/requests/${encodeURIComponent(id)}`)).json()) as Record<string, unknown>
  const counted = sumOf(await proxy.scrape(), 'llm_requests_total', { route, error_type: errorType })
  return { outcome: String(line.outcome), line, debug, counted }
}

async function post(route: string, id: string, headers: Record<string, string>): Promise<number> {
  const path = route === '/anthropic' ? '/v1/messages' : '/v1/chat/completions'
  const res = await fetch(`${proxy.url}${route}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': id, ...headers }, body: chatBody() })
  await res.arrayBuffer().catch(() => undefined)
  return res.status
}

const CASES: readonly { readonly errorType: string; readonly how: string; readonly route: string; readonly headers: Record<string, string>; readonly status: number; readonly outcome: string }[] = [
  { errorType: 'none', how: 'a whole stream', route: '/openai', headers: { 'x-fault': 'ok' }, status: 200, outcome: 'ok' },
  { errorType: 'upstream_rate_limited', how: "the provider's 429", route: '/openai', headers: { 'x-fault': 'status429' }, status: 429, outcome: 'error' },
  {
    errorType: 'upstream_rate_limited',
    how: "Anthropic's rate_limit_error event inside a 200 stream",
    route: '/anthropic',
    headers: { 'x-fault': 'anthropicRateLimited' },
    status: 200,
    outcome: 'error',
  },
  { errorType: 'upstream_overloaded', how: "Anthropic's 529", route: '/anthropic', headers: { 'x-fault': 'status529' }, status: 529, outcome: 'error' },
  {
    errorType: 'upstream_overloaded',
    how: "Anthropic's overloaded_error event inside a 200 stream",
    route: '/anthropic',
    headers: { 'x-fault': 'anthropicOverloaded' },
    status: 200,
    outcome: 'error',
  },
  { errorType: 'upstream_error', how: "the provider's 500", route: '/openai', headers: { 'x-fault': 'status500' }, status: 500, outcome: 'error' },
  { errorType: 'upstream_timeout', how: 'no response head within headers_timeout_ms', route: '/openai', headers: { 'x-fault': 'hang' }, status: 504, outcome: 'error' },
  { errorType: 'upstream_unreachable', how: 'a refused connection', route: '/nowhere', headers: {}, status: 502, outcome: 'error' },
  { errorType: 'upstream_reset', how: 'an upstream that cuts the stream after one event', route: '/openai', headers: { 'x-fault': 'reset' }, status: 200, outcome: 'error' },
  { errorType: 'stream_error', how: 'an error event that names no known code', route: '/openai', headers: { 'x-fault': 'streamError' }, status: 200, outcome: 'error' },
  { errorType: 'client_rejected', how: "the provider's 401", route: '/openai', headers: { 'x-fault': 'status401' }, status: 401, outcome: 'error' },
  { errorType: 'policy', how: "the app's own onRequest hook answering 429", route: '/openai', headers: { 'x-policy': 'refuse' }, status: 429, outcome: 'error' },
]

for (const [i, c] of CASES.entries()) {
  // Its route and class so far, this request included (two cases share /anthropic and upstream_overloaded).
  const expected = CASES.slice(0, i + 1).filter((d) => d.route === c.route && d.errorType === c.errorType).length
  t.test(`${c.how} is error_type ${c.errorType} on the counter, the log line and /debug/requests`, async (t) => {
    const id = `case-${c.errorType}-${c.headers['x-fault'] ?? c.headers['x-policy'] ?? 'none'}`
    const status = await post(c.route, id, c.headers)
    t.equal(status, c.status)
    const s = await seen(id, c.route, c.errorType)
    t.equal(s.outcome, c.outcome)
    t.equal(s.line.error_type, c.errorType === 'none' ? undefined : c.errorType, 'the log line (absent when ok)')
    t.equal(s.debug.error_type, c.errorType)
    t.equal(s.debug.status, c.status)
    t.equal(s.counted, expected, 'counted under its class')
  })
}

t.test('a client that leaves mid-stream is error_type client_cancelled on the counter, the log line and /debug/requests', async (t) => {
  const id = 'case-client-cancelled'
  const { res, req } = await openRequest(`${proxy.url}/openai/v1/chat/completions`, {
    headers: { 'content-type': 'application/json', 'x-request-id': id, 'x-fault': 'hold' },
    body: chatBody(),
  })
  await new Promise<void>((r) => res.once('data', () => r()))
  req.destroy()
  const s = await seen(id, '/openai', 'client_cancelled')
  t.equal(s.outcome, 'cancelled')
  t.equal(s.line.error_type, 'client_cancelled')
  t.equal(s.debug.error_type, 'client_cancelled')
  t.equal(s.counted, 1)
})

t.test('a request body that stops for client_body_timeout_ms is error_type client_timeout on the counter, the log line and /debug/requests', async (t) => {
  const id = 'case-client-timeout'
  const head = `POST /openai/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: ${id}\r\nx-fault: hang\r\ncontent-length: 100\r\n\r\n{"model":`
  const reply = await rawExchange(portOf(proxy.url), head)
  t.match(reply.toString('latin1'), /^HTTP\/1\.1 408 /)
  const s = await seen(id, '/openai', 'client_timeout')
  t.equal(s.outcome, 'error')
  t.equal(s.line.error_type, 'client_timeout')
  t.equal(s.debug.error_type, 'client_timeout')
  t.equal(s.counted, 1)
})

t.test('each class is counted exactly as often as it was produced', async (t) => {
  await waitFor('every request recorded', () => proxy.app.tokentap.active.size === 0)
  const samples = await proxy.scrape()
  const byType = (errorType: string): number => sumOf(samples, 'llm_requests_total', { error_type: errorType })
  t.same(
    Object.fromEntries(
      [
        'none',
        'upstream_rate_limited',
        'upstream_overloaded',
        'upstream_error',
        'upstream_timeout',
        'upstream_unreachable',
        'upstream_reset',
        'stream_error',
        'client_rejected',
        'client_cancelled',
        'client_timeout',
        'policy',
      ].map((e) => [e, byType(e)]),
    ),
    {
      none: 1,
      upstream_rate_limited: 2,
      upstream_overloaded: 2,
      upstream_error: 1,
      upstream_timeout: 1,
      upstream_unreachable: 1,
      upstream_reset: 1,
      stream_error: 1,
      client_rejected: 1,
      client_cancelled: 1,
      client_timeout: 1,
      policy: 1,
    },
  )
  t.equal(sumOf(samples, 'llm_requests_total'), 14)
})
