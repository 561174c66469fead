import { createHmac } from 'node:crypto'
import { get } from 'node:http'
import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { parseMetrics, select, sumOf } from '../helpers/prometheus.ts'
import { eventually } from '../helpers/eventually.ts'
import { rawRequest } from '../helpers/http.ts'
import { respond, tapedClient } from '../helpers/realtime.ts'

// metrics.tenant end to end: the exact label sets a sequence of requests makes (header values,
// none, other past the cap), the in-flight gauges and realtime families, and with
// `from: api_key` the keyed hash of the key, while the key itself appears in no output of the
// proxy: /metrics, the log, the live page and its events, /debug/streams, /debug/requests/{id}.

const SECRET = 'tenant-test-secret-0123456789'
const hash = (key: string): string => createHmac('sha256', SECRET).update(key).digest('hex').slice(0, 12)

const PLAN = { ttft_ms: 1, first_tokens: 1, chunks: [[1, 2] as [number, number]] }

async function chat(proxy: RunningProxy, apiKey: string, headers: Record<string, string> = {}): Promise<void> {
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey, maxRetries: 0 })
  const stream = await client.chat.completions.create({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: 'hi' }] }, { headers: { ...simPlan(PLAN).headers, ...headers } })
  for await (const _ of stream);
}

/** Every distinct value of `tenant` on the llm_ samples, and whether every llm_ sample has one. */
function tenants(text: string): { values: string[]; everyLlmSeries: boolean } {
  const llm = parseMetrics(text).filter((s) => s.name.startsWith('llm_'))
  return { values: [...new Set(llm.map((s) => s.labels.tenant))].sort(), everyLlmSeries: llm.every((s) => s.labels.tenant !== undefined) }
}

t.test('a sequence of header values makes exactly these tenant label sets: values up to max_values, then other; none without the header', async (t) => {
  const proxy = await startProxy({ metrics: { tenant: { header: 'x-team', max_values: 2 } }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const seq = ['search', undefined, 'ads', 'billing', 'search', 'other', 'maps', 'ads']
  for (const team of seq) await chat(proxy, 'sk-x', team === undefined ? {} : { 'x-team': team })
  const lines = await proxy.waitForRequests(seq.length)
  t.same(
    lines.map((l) => l.tenant),
    ['search', 'none', 'ads', 'other', 'search', 'other', 'other', 'ads'],
    'each log line names its tenant label',
  )
  const text = await proxy.scrapeText()
  const m = parseMetrics(text)
  t.same(
    select(m, 'llm_requests_total').map((s) => [s.labels.tenant, s.value]),
    [
      ['search', 2],
      ['none', 1],
      ['ads', 2],
      ['other', 3],
    ],
    'llm_requests_total by tenant, in the order the label sets were made',
  )
  t.same(tenants(text), { values: ['ads', 'none', 'other', 'search'], everyLlmSeries: true }, 'every llm_ series carries the tenant label')
  t.equal(sumOf(m, 'llm_output_tokens_total', { tenant: 'other' }), 3 * 3, 'three requests of 3 output tokens counted under other')
  t.same(
    select(m, 'llm_time_to_first_token_seconds_count').map((s) => Object.keys(s.labels).sort()),
    [
      ['model', 'provider', 'route', 'tenant'],
      ['model', 'provider', 'route', 'tenant'],
      ['model', 'provider', 'route', 'tenant'],
      ['model', 'provider', 'route', 'tenant'],
    ],
  )
})

t.test('the in-flight gauge counts a request under its tenant while it streams', async (t) => {
  const proxy = await startProxy({ metrics: { tenant: { header: 'x-team', max_values: 10 } }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-x', maxRetries: 0 })
  // A first token after 60 s: the request is in flight until the test cancels it.
  const ac = new AbortController()
  const pending = client.chat.completions
    .create(
      { model: 'sim-model', stream: true, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { ...simPlan({ ttft_ms: 60_000, first_tokens: 1, chunks: [] }).headers, 'x-team': 'search' }, signal: ac.signal },
    )
    .then(async (s) => {
      for await (const _ of s);
    })
    .catch(() => undefined)
  await eventually(
    'the request in flight',
    async () => sumOf(await proxy.scrape(), 'llm_requests_in_flight', { tenant: 'search' }),
    (n) => n === 1,
  )
  t.same(
    select(await proxy.scrape(), 'llm_requests_in_flight').map((s) => s.labels),
    [{ provider: 'openai', model: 'sim-model', route: '/sim', tenant: 'search' }],
  )
  ac.abort()
  await pending
  await proxy.waitForRequests(1)
  t.equal(sumOf(await proxy.scrape(), 'llm_requests_in_flight', { tenant: 'search' }), 0)
})

t.test('realtime sessions carry the tenant on their families and on the sessions-in-flight gauge', async (t) => {
  const proxy = await startProxy({ metrics: { tenant: { header: 'x-team', max_values: 10 } }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const c = tapedClient(`${proxy.url.replace('http', 'ws')}/sim/v1/realtime?model=gpt-realtime`, { headers: { 'x-team': 'voice' } })
  await c.opened
  await respond(c, { ttft_ms: 5, first_tokens: 1, chunks: [[5, 1]] }, 1)
  await eventually(
    'the open session',
    async () => sumOf(await proxy.scrape(), 'llm_realtime_sessions_in_flight', { tenant: 'voice' }),
    (n) => n === 1,
  )
  c.ws.close(1000, 'bye')
  await c.closed
  await eventually(
    'the session recorded',
    async () => sumOf(await proxy.scrape(), 'llm_realtime_sessions_total', { tenant: 'voice' }),
    (n) => n === 1,
  )
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_realtime_responses_total', { tenant: 'voice', outcome: 'ok' }), 1)
  t.equal(sumOf(m, 'llm_realtime_time_to_first_token_seconds_count', { tenant: 'voice' }), 1)
  t.equal(sumOf(m, 'llm_realtime_sessions_in_flight', { tenant: 'voice' }), 0)
  t.ok(
    m.filter((s) => s.name.startsWith('llm_realtime_')).every((s) => s.labels.tenant === 'voice'),
    'every realtime series carries the tenant',
  )
})

t.test('from: api_key: the label is the key’s 12-hex HMAC, and the key appears in no output of the proxy', async (t) => {
  const proxy = await startProxy({ metrics: { tenant: { from: 'api_key', secret: SECRET, max_values: 10 } }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const KEY_A = 'sk-proj-TENANT-A-7f3c9e21d4b8'
  const KEY_B = 'sk-proj-TENANT-B-02aa91c3e6f5'
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: KEY_B, maxRetries: 0 })
  // One request kept in flight (its first token after 8 s) while the outputs are read, so
  // /debug/streams and the live events have it. It ends by itself: a client abort of a held
  // simulator stream can hold the proxy's close for the simulator's remaining time.
  const held = client.chat.completions
    .create(
      { model: 'sim-model', stream: true, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { ...simPlan({ ttft_ms: 8000, first_tokens: 1, chunks: [] }).headers, 'x-request-id': 'held-1' } },
    )
    .then(async (s) => {
      for await (const _ of s);
    })
  await chat(proxy, KEY_A, { 'x-request-id': 'done-1' })
  await chat(proxy, KEY_A)
  await proxy.waitForRequests(2)
  await eventually(
    'the held request in flight',
    async () => sumOf(await proxy.scrape(), 'llm_requests_in_flight', { tenant: hash(KEY_B) }),
    (n) => n === 1,
  )

  const outputs: Record<string, string> = {}
  outputs.metrics = await proxy.scrapeText()
  outputs.openmetrics = await (await fetch(`${proxy.adminUrl}/metrics`, { headers: { accept: 'application/openmetrics-text; version=1.0.0' } })).text()
  outputs.debugStreams = await (await fetch(`${proxy.adminUrl}/debug/streams`)).text()
  outputs.debugRequest = await (await fetch(`${proxy.adminUrl}/debug/requests/done-1`)).text()
  outputs.livePage = await (await fetch(`${proxy.adminUrl}/`)).text()
  outputs.liveEvents = await firstEvent(`${proxy.adminUrl}/live/events`)
  await held
  await proxy.waitForRequests(3)
  outputs.log = JSON.stringify(proxy.logs)

  t.same(tenants(outputs.metrics), { values: [hash(KEY_A), hash(KEY_B)].sort(), everyLlmSeries: true }, 'the tenants are the two keys’ hashes')
  t.equal(sumOf(parseMetrics(outputs.metrics), 'llm_requests_total', { tenant: hash(KEY_A) }), 2)
  t.match(outputs.debugStreams, /held-1/, '/debug/streams lists the held request')
  t.match(outputs.debugRequest, /done-1/, '/debug/requests/done-1 found the request')
  t.match(outputs.liveEvents, /sim-model/, 'the live events carry the requests')
  t.equal(proxy.logs.filter((l) => l.msg === 'request' && l.tenant === hash(KEY_A)).length, 2, 'the log lines carry the hash')
  for (const [name, text] of Object.entries(outputs)) {
    for (const key of [KEY_A, KEY_B]) {
      t.notOk(text.includes(key), `${name} does not contain the key`)
      t.notOk(text.includes(key.slice(8)), `${name} does not contain a part of the key`)
    }
  }
})

t.test('from: api_key: requests whose key headers are empty on the wire are the none tenant', async (t) => {
  const proxy = await startProxy({ metrics: { tenant: { from: 'api_key', secret: SECRET, max_values: 10 } }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  // As curl sends them with an unset $KEY: `Authorization: Bearer ` and friends, raw on the wire.
  const empties: Record<string, string>[] = [
    { authorization: 'Bearer ' },
    { authorization: 'bearer  ' },
    { authorization: 'Basic ' },
    { authorization: 'Basic Og==' },
    { authorization: 'AWS4-HMAC-SHA256 Credential=/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=0f' },
    { 'x-api-key': ' ' },
    { 'api-key': '' },
    { 'x-goog-api-key': '' },
  ]
  for (const headers of empties) {
    const res = await rawRequest(`${proxy.url}/sim/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...simPlan(PLAN).headers, ...headers },
      body: JSON.stringify({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    })
    t.equal(res.status, 200, res.body.toString())
  }
  await rawRequest(`${proxy.url}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-real', ...simPlan(PLAN).headers },
    body: JSON.stringify({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  })
  const lines = await proxy.waitForRequests(empties.length + 1)
  t.same(
    lines.map((l) => l.tenant),
    [...empties.map(() => 'none'), hash('sk-real')],
    'each empty key is none; the real key its hash',
  )
  t.same(
    select(await proxy.scrape(), 'llm_requests_total').map((s) => [s.labels.tenant, s.value]),
    [
      ['none', empties.length],
      [hash('sk-real'), 1],
    ],
  )
})

/**
 * The first message of the live event stream, as text. Over a connection of its own that the
 * test destroys: an aborted fetch leaves its pooled socket to the admin listener open, which
 * holds the listener's close for a minute.
 */
function firstEvent(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get(url, { agent: false }, (res) => {
      let text = ''
      res.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8')
        const m = /data: (.*)\n\n/.exec(text)
        if (m !== null) {
          req.destroy()
          resolve(m[1])
        }
      })
    })
    req.on('error', reject)
  })
}
