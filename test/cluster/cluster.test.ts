import t from 'tap'
import { simRoute } from '../helpers/proxy.ts'
import { parseMetrics, select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { startServerProcess } from '../helpers/server-process.ts'
import type { ServerProcess } from '../helpers/server-process.ts'
import { findTool, run } from '../helpers/tools.ts'
import { eventually } from '../helpers/eventually.ts'
import { openChromium } from '../helpers/browser.ts'
import { respond, tapedClient } from '../helpers/realtime.ts'
import type { TapedClient } from '../helpers/realtime.ts'
import { decodeFamilies, nativeBuckets } from '../helpers/protobuf-metrics.ts'

/** What Prometheus sends when it scrapes native histograms. */
const PROTOBUF_ACCEPT = 'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.9,text/plain;version=0.0.4;q=0.3'

// Two tokens of gap per request: first chunk at 5 ms, then two more chunks.
const PLAN = {
  ttft_ms: 5,
  chunks: [
    [5, 1],
    [5, 2],
  ] as [number, number][],
}
const TOKENS = 4

async function complete(proxyUrl: string, plan: object = PLAN): Promise<string> {
  const res = await fetch(`${proxyUrl}/sim/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(plan) },
    body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  })
  return res.text()
}

/** Sends `n` requests, `parallel` at a time. */
async function drive(proxyUrl: string, n: number, parallel = 4): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < n) {
        next++
        await complete(proxyUrl)
      }
    }),
  )
}

/**
 * The server's `n` request log lines. A worker's lines leave in batches, up to 50 ms after the
 * request (logger.ts): what the metrics already count may not be in the log yet.
 */
function requestLines(server: ServerProcess, n: number): Promise<Record<string, unknown>[]> {
  return eventually(
    `${n} request log lines`,
    () => server.logs.filter((l) => l.msg === 'request'),
    (lines) => lines.length >= n,
  )
}

async function scrapeUntil(adminUrl: string, requests: number): Promise<{ text: string; samples: Sample[] }> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const text = await (await fetch(`${adminUrl}/metrics`)).text()
    const samples = parseMetrics(text)
    if (sumOf(samples, 'llm_requests_total') >= requests || Date.now() > deadline) return { text, samples }
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** A realtime session on a worker's simulator, with the given id, `responses` answered responses. */
async function realtimeSession(proxyUrl: string, id: string, responses: number): Promise<TapedClient> {
  const c = tapedClient(`${proxyUrl.replace('http', 'ws')}/sim/v1/realtime?model=gpt-realtime`, { headers: { 'x-request-id': id } })
  await c.opened
  for (let i = 1; i <= responses; i++)
    await respond(
      c,
      {
        ttft_ms: 5,
        first_tokens: 1,
        chunks: [
          [5, 1],
          [5, 2],
        ],
        audio_ms_per_token: 30,
      },
      i,
    )
  return c
}

/** Reads the live page's server-sent events until `pick` returns something for one. */
async function firstEvent<T>(url: string, pick: (msg: Record<string, unknown>) => T | undefined): Promise<T> {
  const controller = new AbortController()
  const res = await fetch(url, { signal: controller.signal })
  const decoder = new TextDecoder()
  let text = ''
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true })
      let end = text.indexOf('\n\n')
      while (end >= 0) {
        const event = text.slice(0, end)
        text = text.slice(end + 2)
        end = text.indexOf('\n\n')
        if (!event.startsWith('data: ')) continue
        const found = pick(JSON.parse(event.slice(6)) as Record<string, unknown>)
        if (found !== undefined) return found
      }
    }
  } finally {
    controller.abort()
  }
  throw new Error('the live events ended')
}

t.setTimeout(900_000)

t.test('with workers: 2 the primary serves one aggregated /metrics whose counts are exact, replaces a dead worker and drains on SIGTERM', async (t) => {
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers: 2, drain_seconds: 10 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    routes: [simRoute()],
  })
  t.teardown(() => server.kill())
  // The primary and its workers start from dist/; the bound is for a heavily loaded machine.
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  t.equal(up.workers, 2, 'the primary reports two workers')
  const proxyUrl = `http://${up.proxy as string}`
  const adminUrl = `http://${up.admin as string}`
  t.equal((await fetch(`${adminUrl}/readyz`)).status, 200, 'ready once every worker listens')
  t.equal((await fetch(`${adminUrl}/healthz`)).status, 200)

  const K = 24
  await drive(proxyUrl, K)
  const { text, samples: m } = await scrapeUntil(adminUrl, K)
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/sim' }
  t.equal(sumOf(m, 'llm_requests_total'), K, 'llm_requests_total sums to exactly K across workers')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok', status_code: '200' }), K, 'all of them ok, in one series')
  t.equal(select(m, 'llm_requests_total').length, 1, 'the workers\u2019 series merge into one')
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), K, 'one TTFT per request')
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_bucket', { ...labels, le: '+Inf' }), K, 'the +Inf bucket equals the count')
  t.equal(sumOf(m, 'llm_inter_chunk_latency_seconds_count', labels), 2 * K, 'two gaps per request')
  t.equal(sumOf(m, 'llm_inter_token_latency_seconds_count', labels), (TOKENS - 1) * K, 'N − k1 ITL observations per request')
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'ok' }), K)
  t.equal(sumOf(m, 'llm_output_tokens_total', labels), TOKENS * K, 'every output token counted once')
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
    'in flight sums to 0 when idle',
  )
  // Buckets stay cumulative after the bucket-wise sum.
  const buckets = select(m, 'llm_inter_chunk_latency_seconds_bucket', labels).map((s) => s.value)
  t.ok(
    buckets.every((v, i) => i === 0 || v >= buckets[i - 1]),
    'aggregated buckets are cumulative',
  )
  t.match(text, /# TYPE llm_inter_token_latency_seconds histogram/, 'the histogram keeps its type')
  const promtool = findTool(t, 'promtool')
  if (promtool !== undefined) t.equal(run(promtool, ['check', 'metrics'], text).output, '', 'promtool check metrics finds nothing in the aggregated scrape')

  // Both workers took traffic: a worker's log lines carry its pid.
  const pids = new Set((await requestLines(server, K)).map((l) => Number(l.pid)))
  t.equal(pids.size, 2, 'requests were spread over both workers')

  // A worker that dies is replaced, and what it had counted is not lost.
  const victim = [...pids][0]
  process.kill(victim, 'SIGKILL')
  await server.waitForLog((l) => l.msg === 'worker died: starting a new one' && l.pid === victim, 60_000)
  const deadline = Date.now() + 300_000
  while ((await fetch(`${adminUrl}/readyz`)).status !== 200) {
    if (Date.now() > deadline) throw new Error('the replacement worker never became ready')
    await new Promise((r) => setTimeout(r, 50))
  }
  const K2 = 8
  await drive(proxyUrl, K2)
  const after = (await scrapeUntil(adminUrl, K + K2)).samples
  t.equal(sumOf(after, 'llm_requests_total'), K + K2, 'counts survive a worker\u2019s death and keep adding up')
  t.equal(sumOf(after, 'llm_time_to_first_token_seconds_count', labels), K + K2)

  // SIGTERM to the primary: an open stream finishes, /readyz turns 503, the process exits 0.
  const long = complete(proxyUrl, { ttft_ms: 5, chunks: Array.from({ length: 8 }, () => [500, 1]) })
  // SIGTERM once a worker has the stream in flight (its 4 s are far longer than a scrape).
  await eventually(
    'the stream in flight',
    async () => sumOf(parseMetrics(await (await fetch(`${adminUrl}/metrics`)).text()), 'llm_requests_in_flight'),
    (n) => n >= 1,
  )
  server.child.kill('SIGTERM')
  await server.waitForLog((l) => l.msg === 'draining')
  t.equal((await fetch(`${adminUrl}/readyz`)).status, 503, 'not ready while draining')
  const body = await long
  t.match(body, /data: \[DONE\]/, 'the in-flight stream ran to its end')
  t.equal(await server.exited, 0, 'the primary exits 0 after its workers drained')
  t.notOk(
    server.logs.some((l) => l.msg === 'drain deadline reached: ending open streams'),
    'the workers exit once their streams end, not at drain_seconds',
  )
})

t.test('with workers: 2 the admin port serves what one process serves: the live page, /debug/streams, /debug/requests/{id} of either worker, OpenMetrics with exemplars', async (t) => {
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers: 2, drain_seconds: 10 },
    admin: { host: '127.0.0.1', port: 0 },
    metrics: { exemplars: true, stall_seconds: 1 },
    log: { level: 'info' },
    routes: [simRoute()],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  const proxyUrl = `http://${up.proxy as string}`
  const adminUrl = `http://${up.admin as string}`

  // The live page is open before the traffic, as an operator would have it.
  const chromium = await openChromium(t)
  const page = chromium?.page
  const errors: string[] = []
  page?.on('pageerror', (err) => errors.push(err.message))
  if (page !== undefined) {
    await page.goto(`${adminUrl}/`)
    await page.waitForSelector('#conn[data-conn="open"]', { timeout: 30_000 })
  }

  const K = 16
  await drive(proxyUrl, K)
  await scrapeUntil(adminUrl, K)
  const requestLog = await requestLines(server, K)

  // One finished request of each worker (a worker's log lines carry its pid).
  const served = new Map<number, string>()
  for (const l of requestLog) served.set(Number(l.pid), String(l.request_id))
  t.equal(served.size, 2, 'both workers served requests')
  for (const [pid, id] of served) {
    const found = await eventually(
      `request ${id}`,
      async () => fetch(`${adminUrl}/debug/requests/${encodeURIComponent(id)}`),
      (res) => res.status === 200,
    )
    const view = (await found.json()) as Record<string, unknown>
    t.equal(view.request_id, id, `/debug/requests finds the request worker ${pid} served`)
    t.equal(view.route, '/sim', 'with its figures')
  }
  const missing = await fetch(`${adminUrl}/debug/requests/no-such-request`)
  t.equal(missing.status, 404, 'an id no worker has is a 404')

  const om = await fetch(`${adminUrl}/metrics`, { headers: { accept: 'application/openmetrics-text; version=1.0.0' } })
  t.match(om.headers.get('content-type'), /^application\/openmetrics-text/, 'OpenMetrics when asked for')
  const omText = await om.text()
  t.match(omText, /llm_time_to_first_token_seconds_bucket\{[^}]*\} \d+ # \{request_id="[^"]+"\} [\d.e-]+ \d+\.\d{3}\n/, 'buckets carry exemplars')
  t.match(omText, /# EOF\n$/, 'the exposition ends with # EOF')
  const logged = new Set(requestLog.map((l) => String(l.request_id)))
  const exemplarIds = [...omText.matchAll(/# \{request_id="([^"]+)"\}/g)].map((m) => m[1])
  t.ok(exemplarIds.length >= 1 && exemplarIds.every((id) => logged.has(id)), 'the exemplars name requests the workers served')

  // A protobuf scraper gets the workers' native histograms merged, with the classic buckets beside them.
  const pb = await fetch(`${adminUrl}/metrics`, { headers: { accept: PROTOBUF_ACCEPT } })
  t.match(pb.headers.get('content-type'), /^application\/vnd\.google\.protobuf/, 'the protobuf exposition when a scraper prefers it')
  const families = decodeFamilies(new Uint8Array(await pb.arrayBuffer()))
  const ttft = families.find((f) => f.name === 'llm_time_to_first_token_seconds')
  const ttftSeries = ttft?.metric.find((m) => m.histogram !== undefined && Number(m.histogram.sample_count) === K)
  t.ok(ttftSeries !== undefined, `one TTFT series counts all ${K} requests of both workers`)
  const native = ttftSeries?.histogram
  t.equal(native?.schema, 3, 'as a native histogram at the default schema')
  t.equal(native === undefined ? 0 : [...nativeBuckets(native).values()].reduce((a, b) => a + b, 0) + Number(native.zero_count ?? 0), K, 'whose native buckets hold every observation')
  t.equal(native?.bucket.at(-1)?.cumulative_count === undefined ? undefined : Number(native.bucket.at(-1)?.cumulative_count), K, 'and classic buckets beside them')
  t.ok(
    families.some((f) => f.name.startsWith('process_') || f.name.startsWith('nodejs_')),
    "the workers' process metrics too",
  )

  // A stream in flight: /debug/streams lists it, and the live page shows it.
  const long = complete(proxyUrl, { ttft_ms: 5, chunks: Array.from({ length: 10 }, () => [300, 1]) })
  const streams = await eventually(
    'the stream in /debug/streams',
    async () => (await (await fetch(`${adminUrl}/debug/streams`)).json()) as { in_flight: number; streams: { route: string; chunks: number }[] },
    (s) => s.in_flight === 1 && s.streams.length === 1 && s.streams[0].chunks >= 1,
  )
  t.equal(streams.streams[0].route, '/sim', '/debug/streams lists the stream in flight of whichever worker runs it')
  if (page !== undefined) {
    await page.waitForFunction(() => Number(document.querySelector('#inflight')?.textContent) >= 1, undefined, { timeout: 30_000 })
    t.pass('the live page shows the stream in flight')
  }
  // The live events carry the stream's chunks as they come (the page draws them as ticks).
  const ticks = await firstEvent(`${adminUrl}/live/events`, (msg) => {
    const s = (msg.streams as { ticks: number[]; ended?: boolean }[]).find((x) => x.ended !== true)
    return s !== undefined && s.ticks.length >= 2 ? s.ticks : undefined
  })
  t.ok(
    ticks.every((v, i) => i === 0 || v >= ticks[i - 1]),
    `the live events draw the worker's stream: ticks at ${ticks.join(', ')} µs`,
  )
  await long

  if (page !== undefined) {
    await page.waitForSelector('[data-route="/sim"]', { timeout: 30_000 })
    await page.waitForFunction((n) => Number(document.querySelector('[data-count="ok"]')?.textContent) === n, K + 1, { timeout: 30_000 })
    t.pass(`the live page counts all ${K + 1} requests of both workers`)
    const card = page.locator('[data-route="/sim"]')
    t.equal(await card.locator('[data-model="gpt-4o-mini"] [data-series-count="ok"] b').textContent(), String(K + 1), 'in one route and model block')
    t.match(await card.locator('table.q').first().textContent(), /TTFT.*ITL.*TPOT.*E2E/s, 'with its percentile table')
    t.same(errors, [], 'no script errors on the page')
  }

  // Realtime sessions: the open one on the live events, the finished one on /debug/requests/{id}.
  const open = await realtimeSession(proxyUrl, 'voice-open', 1)
  const done = await realtimeSession(proxyUrl, 'voice-1', 2)
  done.ws.close(1000, 'bye')
  await done.closed
  const rt = await firstEvent(`${adminUrl}/live/events`, (msg) => {
    const r = msg.realtime as { open: number; sessions: { id: string }[]; series: { route: string; sessions: number[]; ok: number[] }[] }
    return r.open === 1 && r.series.length === 1 && r.series[0].sessions[0] === 1 && r.series[0].ok[0] === 3 ? r : undefined
  })
  t.match(rt.sessions, [{ id: 'voice-open' }], 'the live events carry the open realtime session of a worker')
  t.match(rt.series[0], { route: '/sim', sessions: [1, 1, 1], ok: [3, 3, 3] }, 'and the realtime figures its workers sent')
  const sessionView = (await (await fetch(`${adminUrl}/debug/requests/voice-1`)).json()) as Record<string, unknown>
  t.match(sessionView, { request_id: 'voice-1', kind: 'realtime_session', response_count: 2, close_code: 1000 }, '/debug/requests finds the finished session')
  const rm = parseMetrics(await (await fetch(`${adminUrl}/metrics`)).text())
  t.equal(sumOf(rm, 'llm_realtime_sessions_total'), 1, 'the realtime metrics are merged too: one finished session')
  t.equal(sumOf(rm, 'llm_realtime_sessions_in_flight'), 1, 'and one open')
  t.equal(sumOf(rm, 'llm_realtime_time_to_first_token_seconds_count'), 3, 'a TTFT per response')
  open.ws.close(1000)
  await open.closed

  // A worker that stops answering (SIGSTOP) leaves a lookup at the timeout, never pending.
  const [stoppedPid, stoppedId] = [...served][0]
  const pid = stoppedPid
  process.kill(pid, 'SIGSTOP')
  try {
    const res = await fetch(`${adminUrl}/debug/requests/${encodeURIComponent(stoppedId)}`)
    t.equal(res.status, 404, 'the lookup is answered once the stopped worker’s time is up, without it')
  } finally {
    process.kill(pid, 'SIGCONT')
  }
})
