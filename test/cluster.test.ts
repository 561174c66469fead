import t from 'tap'
import { simRoute } from './helpers/proxy.ts'
import { parseMetrics, select, sumOf } from './helpers/prometheus.ts'
import type { Sample } from './helpers/prometheus.ts'
import { startServerProcess } from './helpers/server-process.ts'
import { findTool, run } from './helpers/tools.ts'
import { eventually } from './helpers/eventually.ts'

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

async function scrapeUntil(adminUrl: string, requests: number): Promise<{ text: string; samples: Sample[] }> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const text = await (await fetch(`${adminUrl}/metrics`)).text()
    const samples = parseMetrics(text)
    if (sumOf(samples, 'llm_requests_total') >= requests || Date.now() > deadline) return { text, samples }
    await new Promise((r) => setTimeout(r, 50))
  }
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

  // Both workers took traffic: request ids carry the worker's pid.
  const pids = new Set(server.logs.filter((l) => l.msg === 'request').map((l) => String(l.request_id).split('-')[1]))
  t.equal(pids.size, 2, 'requests were spread over both workers')

  // A worker that dies is replaced, and what it had counted is not lost.
  const victim = parseInt([...pids][0], 36)
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
