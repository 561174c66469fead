import { Script } from 'node:vm'
import t from 'tap'
import OpenAI from 'openai'
import { startProxy, simPlan, simRoute } from '../helpers/proxy.ts'
import { validateConfig } from '../../src/config/load-config.ts'

const TOKEN = 'live-SECRET-token'
/**
 * 20 ms between chunks and one 1,000 ms stall (stall_seconds 0.2 below). The simulator keeps absolute
 * offsets, so a late earlier chunk shortens the stall's gap: 400 ms once fell under 200 ms at load 20.
 */
const PLAN = {
  ttft_ms: 30,
  first_tokens: 1,
  chunks: [
    [20, 1],
    [20, 2],
    [1000, 1],
    [20, 1],
    [20, 1],
  ] as [number, number][],
}

async function stream(client: OpenAI, headers: Record<string, string> = {}): Promise<void> {
  const s = await client.chat.completions.create({ model: 'sim-model', stream: true, messages: [{ role: 'user', content: 'hi' }] }, { headers: { ...simPlan(PLAN).headers, ...headers } })
  for await (const _ of s) {
    // drain
  }
}

/** The first `data:` message of the live page's event stream. */
async function firstEvent(url: string, headers: Record<string, string> = {}): Promise<Record<string, unknown>> {
  const ac = new AbortController()
  const res = await fetch(url, { headers, signal: ac.signal })
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  let text = ''
  while (!text.includes('\n\ndata: ') || !text.slice(text.indexOf('\n\ndata: ') + 2).includes('\n\n')) {
    const { value, done } = await reader.read()
    if (done) break
    text += new TextDecoder().decode(value)
  }
  ac.abort()
  const start = text.indexOf('data: ') + 6
  return JSON.parse(text.slice(start, text.indexOf('\n\n', start))) as Record<string, unknown>
}

t.test('/debug/requests/{id} gives the same figures as the request’s log line', async (t) => {
  const proxy = await startProxy({ metrics: { stall_seconds: 0.2 }, debug: { recent_requests: 3 }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-SECRET-key', maxRetries: 0 })
  await stream(client, { 'x-request-id': 'client-id-1' })
  await stream(client)
  const [mine, generated] = await proxy.waitForRequests(2)
  t.equal(mine.request_id, 'client-id-1')

  let stalls = 0
  for (const line of [mine, generated]) {
    const res = await fetch(`${proxy.adminUrl}/debug/requests/${encodeURIComponent(String(line.request_id))}`)
    t.equal(res.status, 200)
    const body = (await res.json()) as Record<string, unknown>
    for (const key of [
      'request_id',
      'route',
      'provider',
      'model',
      'status',
      'outcome',
      'ttft_ms',
      'headers_ms',
      'e2e_ms',
      'tpot_ms',
      'itl_p50_ms',
      'itl_p99_ms',
      'max_gap_ms',
      'output_tokens',
      'output_source',
      'chunks',
      'tps',
    ]) {
      t.equal(body[key], line[key], `${key} as in the log line`)
    }
    // The 1,000 ms gap is a stall; on a loaded machine a 20 ms one may become one too.
    t.ok((body.stalls as number) >= 1, 'the 1,000 ms gap is a stall')
    stalls += body.stalls as number
    t.equal(body.chunks, 6)
    t.equal(body.output_tokens, 7)
    t.type(body.ttfot_ms, 'number')
    t.type(body.ended_at, 'string')
    t.notMatch(JSON.stringify(body), /SECRET|hi|content/, 'no credentials, no text')
  }

  const counted = (await proxy.scrape()).filter((x) => x.name === 'llm_stream_stalls_total').reduce((a, x) => a + x.value, 0)
  t.equal(stalls, counted, 'the stalls are the ones llm_stream_stalls_total counted')

  const unknown = await fetch(`${proxy.adminUrl}/debug/requests/nope`)
  t.equal(unknown.status, 404)
  t.match(unknown.headers.get('content-type'), /application\/json/)
  t.match((await unknown.json()) as object, { request_id: 'nope' })

  // Capacity 3: two more requests push the first one out.
  await stream(client, { 'x-request-id': 'client-id-2' })
  await stream(client, { 'x-request-id': 'client-id-3' })
  await proxy.waitForRequests(4)
  t.equal((await fetch(`${proxy.adminUrl}/debug/requests/client-id-1`)).status, 404, 'the oldest was evicted')
  t.equal((await fetch(`${proxy.adminUrl}/debug/requests/client-id-3`)).status, 200)
})

t.test('admin.token guards the live page, its events and the requests; a browser gets a cookie', async (t) => {
  const proxy = await startProxy({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const base = proxy.adminUrl
  const bare = await fetch(`${base}/`)
  t.equal(bare.status, 401)
  t.notMatch(await bare.text(), /SECRET/)
  t.equal((await fetch(`${base}/?token=wrong`, { redirect: 'manual' })).status, 401)
  const login = await fetch(`${base}/?token=${TOKEN}`, { redirect: 'manual' })
  t.equal(login.status, 303)
  t.equal(login.headers.get('location'), '/', 'the token leaves the address bar')
  const setCookie = login.headers.get('set-cookie') as string
  t.match(setCookie, /^tokentap_admin=[\w-]+; HttpOnly; SameSite=Strict; Path=\/$/)
  t.notMatch(setCookie, /SECRET/, 'the cookie holds a MAC, not the token')
  const cookie = setCookie.split(';')[0]

  const page = await fetch(`${base}/`, { headers: { cookie } })
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type'), /text\/html/)
  t.match(await page.text(), /tokentap/)
  const events = await firstEvent(`${base}/live/events`, { cookie })
  t.match(events, { system: { inFlight: 0 } })
  t.equal((await fetch(`${base}/live/events`)).status, 401, 'events without the cookie or token')
  t.equal((await fetch(`${base}/debug/requests/x`)).status, 401)
  t.equal((await fetch(`${base}/debug/requests/x`, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 404, 'a bearer token works too')
  t.equal((await fetch(`${base}/debug/requests/x`, { headers: { cookie } })).status, 404)
  t.equal((await fetch(`${base}/metrics`, { headers: { cookie } })).status, 401, 'the cookie is not a token for /metrics')
  const js = await fetch(`${base}/live/uplot.js`)
  t.equal(js.status, 200, 'the charting library is public code')
  t.match(await js.text(), /uPlot/)
  t.equal((await fetch(`${base}/live/uplot.css`)).status, 200)
  t.equal((await fetch(`${base}/live/app.js`)).status, 200)
  const icon = await fetch(`${base}/favicon.ico`)
  t.equal(icon.status, 204, 'the icon a browser asks for is an empty answer, token or not, never a 404')
  t.equal((await icon.arrayBuffer()).byteLength, 0)
})

t.test('the event stream carries the finished requests and closing the admin listener ends it', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'k', maxRetries: 0 })
  await stream(client)
  await proxy.waitForRequests(1)
  const msg = (await firstEvent(`${proxy.adminUrl}/live/events`)) as { series: { route: string; model: string; ok: number[] }[] }
  t.equal(msg.series.length, 1)
  t.match(msg.series[0], { route: '/sim', model: 'sim-model', ok: [1, 1, 1] })
  // An open event stream must not hold close().
  const ac = new AbortController()
  const open = await fetch(`${proxy.adminUrl}/live/events`, { signal: ac.signal })
  t.equal(open.status, 200)
  await proxy.close()
  ac.abort()
})

t.test('debug.recent_requests defaults to 10,000 and is validated', async (t) => {
  t.equal(validateConfig({ routes: [simRoute()] }).debug.recent_requests, 10_000)
  t.throws(() => validateConfig({ debug: { recent_requests: -1 }, routes: [simRoute()] }), /recent_requests/)
})

t.test("the page's script, built from client/app.ts, is served as a classic script: no import or export, strict and in its own scope", async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  const html = await (await fetch(`${proxy.adminUrl}/`)).text()
  t.match(html, '<script src="/live/app.js"></script>', 'the page loads it without type="module"')
  const res = await fetch(`${proxy.adminUrl}/live/app.js`)
  t.equal(res.headers.get('content-type'), 'text/javascript; charset=utf-8')
  const js = await res.text()
  // A classic script's grammar: an import or export declaration is a SyntaxError here.
  t.doesNotThrow(() => new Script(js, { filename: 'app.js' }), 'parses as a classic script')
  t.match(js, /^'use strict'\n;\(\(\) => \{\n/, 'strict, in a function')
  t.match(js, "new EventSource('/live/events')", 'the page script')
})
