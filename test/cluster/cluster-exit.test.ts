import { execFileSync } from 'node:child_process'
import t from 'tap'
import type { Test } from 'tap'
import { startDirectSim } from '../helpers/provider-e2e.ts'
import { parseMetrics, select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { startServerProcess } from '../helpers/server-process.ts'
import type { ServerProcess } from '../helpers/server-process.ts'
import { eventually } from '../helpers/eventually.ts'
import { tapedClient } from '../helpers/realtime.ts'
import type { TapedClient } from '../helpers/realtime.ts'

/**
 * A worker killed mid-stream (SIGKILL: no handler runs, as with the OOM killer) takes its
 * requests' connections with it, never their counts: the primary records each of them once, as
 * `error` with TOKENTAP_ERR_WORKER_EXITED and what the worker had sent it of them (cluster/progress.ts),
 * and every counter-like series of the group (llm_, process_, nodejs_) stays monotonic while
 * the worker dies and its replacement starts. Its realtime sessions likewise: each open one an
 * error, each response in flight `worker_exited` with the latencies measured before the death
 * (cluster/realtime-progress.ts).
 */

t.setTimeout(900_000)

/** Long streams: first chunk at 5 ms, then 3 tokens every 100 ms for 20 s. */
const CHUNKS = 200
const PLAN = { ttft_ms: 5, chunks: Array.from({ length: CHUNKS }, () => [100, 3]) }

/** Counter-like samples (`_created` is a timestamp, not a count). */
const counterLike = (name: string): boolean => /(_total|_count|_sum|_bucket)$/.test(name)
const sampleKey = (s: Sample): string =>
  `${s.name}{${Object.entries(s.labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',')}}`

/** Reads the live page's server-sent events until `pick` returns something for one. */
async function firstEvent<T>(url: string, pick: (msg: Record<string, unknown>) => T | undefined): Promise<T> {
  const controller = new AbortController()
  const res = await fetch(url, { signal: controller.signal })
  const decoder = new TextDecoder()
  let text = ''
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true })
      for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
        const event = text.slice(0, end)
        text = text.slice(end + 2)
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

/** Scrapes `/metrics` every 200 ms, as Prometheus would, comparing each scrape with the one before: a counter-like series that drops or vanishes is a reset. */
/**
 * SIGKILLs the first of the primary's two workers and waits for the primary's line about its death;
 * `atKill` is the scrapes taken before it.
 */
async function killOneWorker(t: Test, server: ServerProcess, scraper: { readonly scrapes: number }): Promise<{ victim: number; atKill: number }> {
  const workers = execFileSync('pgrep', ['-P', String(server.child.pid)], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map(Number)
  t.equal(workers.length, 2, 'the primary runs two workers')
  const victim = workers[0]
  process.kill(victim, 'SIGKILL')
  const atKill = scraper.scrapes
  const died = await server.waitForLog((l) => l.msg === 'worker died: starting a new one' && l.pid === victim, 60_000)
  t.equal(died.signal, 'SIGKILL')
  return { victim, atKill }
}

function monotonicScraper(adminUrl: string) {
  let previous = new Map<string, number>()
  const decreases: string[] = []
  const failed: string[] = []
  let scrapes = 0
  let latest: Sample[] = []
  const scrape = async (): Promise<Sample[]> => {
    const res = await fetch(`${adminUrl}/metrics`).catch((err: Error) => err)
    // Not even an answer (the primary gone at the test's end): no sample either.
    if (res instanceof Error) {
      failed.push(res.message)
      return latest
    }
    const text = await res.text()
    // A failed scrape is no sample, as for Prometheus (up = 0).
    if (res.status !== 200) {
      failed.push(`${res.status} ${text}`)
      return latest
    }
    const samples = parseMetrics(text)
    const now = new Map<string, number>()
    for (const s of samples) if (counterLike(s.name)) now.set(sampleKey(s), s.value)
    for (const [key, before] of previous) {
      const after = now.get(key)
      // A float sum merged in another order (one worker's part moved into the dead ones') may differ in its last bit.
      const floor = key.includes('_sum{') ? before - Math.abs(before) * 1e-12 : before
      if (after === undefined || after < floor) decreases.push(`${key}: ${before} → ${after} (scrape ${scrapes})`)
    }
    previous = now
    scrapes++
    return samples
  }
  let scraping = true
  const loop = (async () => {
    latest = await scrape()
    while (scraping) {
      await new Promise((r) => setTimeout(r, 200))
      latest = await scrape()
    }
  })()
  return {
    decreases,
    failed,
    get scrapes() {
      return scrapes
    },
    /** The families of the last scrape's counter-like series. */
    families: () => new Set([...previous.keys()].map((k) => k.slice(0, k.indexOf('{')))),
    /** The latest scrape once `done` holds for it. */
    until: (what: string, done: (m: Sample[]) => boolean): Promise<Sample[]> => eventually(what, () => latest, done, 120_000),
    /** Resolves after a scrape that began after this call. */
    next: async (): Promise<void> => {
      const after = scrapes + 1
      await eventually(
        'a scrape after that',
        () => scrapes,
        (n) => n > after,
      )
    },
    async stop(): Promise<void> {
      scraping = false
      await loop
    },
  }
}

t.test('with workers: 2 a worker killed mid-stream leaves every request it had counted once as an error with its TTFT and tokens, and no counter of the group goes backwards', async (t) => {
  // The simulator in the test's process: a simulator route's would run in the workers, the killed one's with it.
  const sim = await startDirectSim()
  t.teardown(() => sim.close())
  const server = startServerProcess({
    server: { host: '127.0.0.1', port: 0, workers: 2, drain_seconds: 10 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    routes: [{ prefix: '/sim', upstream: sim.url, provider: 'openai' }],
  })
  t.teardown(() => server.kill())
  const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
  const proxyUrl = `http://${up.proxy as string}`
  const adminUrl = `http://${up.admin as string}`

  const scraper = monotonicScraper(adminUrl)
  const scraped = scraper.until
  t.teardown(() => scraper.stop())

  const N = 10
  const ids = Array.from({ length: N }, (_, i) => `exit-${i}`)
  const results = ids.map(async (id) => {
    const res = await fetch(`${proxyUrl}/sim/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': id, 'x-tokentap-sim': JSON.stringify(PLAN) },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    })
    try {
      await res.text()
      return { id, broken: false }
    } catch {
      return { id, broken: true }
    }
  })

  // Every stream in flight with content streamed; the next scrape makes each worker send the primary its chunks first.
  await scraped('all streams in flight', (m) => sumOf(m, 'llm_requests_in_flight') === N)
  await eventually(
    'every stream past its first chunks',
    async () => (await (await fetch(`${adminUrl}/debug/streams`)).json()) as { in_flight: number; streams: { chunks: number }[] },
    (s) => s.in_flight === N && s.streams.every((x) => x.chunks >= 2),
  )
  await scraper.next()

  const { atKill } = await killOneWorker(t, server, scraper)

  const settled = await Promise.all(results)
  const broken = settled.filter((r) => r.broken).map((r) => r.id)
  t.ok(broken.length >= 1 && broken.length < N, `the killed worker had ${broken.length} of the ${N} streams`)

  const m = await scraped('every request counted', (m) => sumOf(m, 'llm_requests_total') >= N)
  const labels = { provider: 'openai', model: 'gpt-4o-mini', route: '/sim' }
  t.equal(sumOf(m, 'llm_requests_total'), N, 'llm_requests_total sums to exactly the requests accepted')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'error', status_code: '200' }), broken.length, 'the killed worker’s requests are errors, with the status their clients got')
  t.equal(sumOf(m, 'llm_requests_total', { ...labels, outcome: 'ok' }), N - broken.length, 'the others ran to their end')
  t.equal(sumOf(m, 'llm_time_to_first_token_seconds_count', labels), N, 'a TTFT for every request, the killed ones included')
  t.equal(sumOf(m, 'llm_request_duration_seconds_count', { ...labels, outcome: 'error' }), broken.length, 'and their E2E up to the death')
  t.ok(sumOf(m, 'llm_output_tokens_total', labels) >= 3 * CHUNKS * (N - broken.length) + 3 * 2 * broken.length, 'the tokens the killed streams had streamed are counted')
  t.same(
    select(m, 'llm_requests_in_flight').map((s) => s.value),
    [0],
    'in flight returns to 0',
  )

  const lines = await eventually(
    'the killed requests’ log lines',
    () => server.logs.filter((l) => l.msg === 'request' && l.error === 'TOKENTAP_ERR_WORKER_EXITED'),
    (l) => l.length >= broken.length,
  )
  t.same(lines.map((l) => l.request_id).sort(), [...broken].sort(), 'one log line each, with the reason')
  t.ok(
    lines.every((l) => l.error_detail === 'SIGKILL' && l.outcome === 'error' && typeof l.ttft_ms === 'number'),
    'naming the signal, with the TTFT measured',
  )
  const live = await firstEvent(`${adminUrl}/live/events`, (msg) => {
    const failures = msg.failures as { id: string }[]
    return failures.length >= broken.length ? failures : undefined
  })
  t.same(live.map((f) => f.id).sort(), [...broken].sort(), 'the live page’s failures list shows them')

  // The replacement worker starts; the counters stay monotonic through it and after.
  await eventually(
    'the replacement worker ready',
    async () => (await fetch(`${adminUrl}/readyz`)).status,
    (s) => s === 200,
    300_000,
  )
  const ready = scraper.scrapes
  await eventually(
    'five scrapes with the replacement',
    () => scraper.scrapes,
    (n) => n >= ready + 5,
  )
  await scraper.stop()
  const scrapes = scraper.scrapes
  t.ok(atKill >= 2 && ready > atKill, `${scrapes} scrapes: ${atKill} before the death, ${ready - atKill} until the replacement was ready, ${scrapes - ready} after`)
  t.same(scraper.failed, [], 'every scrape answered, the one during the death too')
  t.same(scraper.decreases, [], 'no counter-like sample of any family went down or vanished')
  const families = scraper.families()
  t.ok(
    ['process_cpu_seconds_total', 'process_cpu_user_seconds_total', 'nodejs_gc_duration_seconds_count', 'llm_requests_total'].every((f) => families.has(f)),
    'the process families were among them',
  )
})

/** Long realtime responses: first delta at 5 ms, then one token every 100 ms for 60 s (the other worker's still stream when the test closes them), with audio. */
const LONG_RESPONSE = { ttft_ms: 5, first_tokens: 1, chunks: Array.from({ length: 600 }, () => [100, 1]), audio_ms_per_token: 20 }
const SHORT_RESPONSE = {
  ttft_ms: 5,
  first_tokens: 1,
  chunks: [
    [5, 1],
    [5, 1],
  ],
  audio_ms_per_token: 20,
}
const deltas = (c: TapedClient): number => c.messages.filter((m) => m.data.includes('_transcript.delta"')).length

t.test(
  'with workers: 2 a worker killed with realtime sessions open leaves each of them counted once as an error and each response in flight as worker_exited with its TTFT, and no counter goes backwards',
  async (t) => {
    const sim = await startDirectSim()
    t.teardown(() => sim.close())
    const server = startServerProcess({
      server: { host: '127.0.0.1', port: 0, workers: 2, drain_seconds: 10 },
      admin: { host: '127.0.0.1', port: 0 },
      log: { level: 'info' },
      routes: [{ prefix: '/sim', upstream: sim.url, provider: 'openai' }],
    })
    t.teardown(() => server.kill())
    const up = await server.waitForLog((l) => l.msg === 'tokentap listening', 300_000)
    const wsUrl = `ws://${up.proxy as string}/sim/v1/realtime?model=gpt-realtime`
    const adminUrl = `http://${up.admin as string}`
    const scraper = monotonicScraper(adminUrl)
    t.teardown(() => scraper.stop())
    const labels = { provider: 'openai', model: 'gpt-realtime', route: '/sim' }
    const open = (id: string): TapedClient => tapedClient(wsUrl, { headers: { 'x-request-id': id } })

    // One session ended normally before the death: its worker counted it, and nothing counts it again.
    const done = open('rt-done')
    await done.opened
    done.ws.send(JSON.stringify({ type: 'response.create', tokentap_sim: SHORT_RESPONSE }))
    await eventually(
      'its response done',
      () => done.messages.some((m) => m.data.includes('"type":"response.done"')),
      (x) => x,
    )
    done.ws.close(1000)
    await done.closed

    // Sessions whose responses are mid-stream; the workers take the connections in turn.
    const N = 6
    const ids = Array.from({ length: N }, (_, i) => `rt-${i}`)
    const clients = ids.map(open)
    await Promise.all(clients.map((c) => c.opened))
    for (const c of clients) c.ws.send(JSON.stringify({ type: 'response.create', tokentap_sim: LONG_RESPONSE }))
    const closedAt = new Map<string, number>()
    clients.forEach((c, i) => {
      c.closed.then(({ code }) => closedAt.set(ids[i], code))
    })
    await eventually(
      'every response past its third delta',
      () => clients.every((c) => deltas(c) >= 3),
      (x) => x,
    )
    await scraper.until('every session in flight', (m) => sumOf(m, 'llm_realtime_sessions_in_flight') === N)
    // The next scrape makes each worker send the primary its sessions' progress first.
    await scraper.next()

    const { victim, atKill } = await killOneWorker(t, server, scraper)
    // The death is handled (its counts kept, its sessions recorded) before that line: a scrape begun after it sees all of it.
    await scraper.next()
    const m = await scraper.until('the scrape after the death', () => true)
    const held = N - sumOf(m, 'llm_realtime_sessions_in_flight')
    t.ok(held >= 1 && held < N, `the killed worker held ${held} of the ${N} sessions`)
    await eventually(
      'their clients cut off',
      () => closedAt.size,
      (n) => n === held,
    )
    const broken = [...closedAt.keys()].sort()
    t.ok(
      [...closedAt.values()].every((code) => code === 1006),
      'without a close frame',
    )
    t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...labels, outcome: 'error' }), held, 'each session the killed worker held is one error')
    t.equal(sumOf(m, 'llm_realtime_sessions_total', { ...labels, outcome: 'ok' }), 1, 'the session that ended before the death is counted once')
    t.equal(sumOf(m, 'llm_realtime_responses_total', { ...labels, outcome: 'error', error_type: 'worker_exited' }), held, 'each response in flight is an error: worker_exited')
    t.equal(sumOf(m, 'llm_realtime_responses_total', labels), 1 + held, 'beside the one that ended before, once')
    t.equal(sumOf(m, 'llm_realtime_time_to_first_token_seconds_count', labels), 1 + held, 'a TTFT for each, the cut ones included')
    t.equal(sumOf(m, 'llm_realtime_time_to_first_audio_seconds_count', labels), 1 + held, 'and a TTFA')
    t.ok(sumOf(m, 'llm_realtime_inter_token_latency_seconds_count', labels) >= 2 + 2 * held, 'and the gaps between the deltas the primary had')
    const cut = await server.waitForLog((l) => l.msg === 'worker exited with realtime sessions open: recorded as failed (TOKENTAP_ERR_WORKER_EXITED)', 60_000)
    t.match(cut, { pid: victim, sessions: held, responses: held }, 'the primary says what it recorded')

    const lines = await eventually(
      'the cut sessions’ log lines',
      () => server.logs.filter((l) => l.msg === 'realtime session' && l.error === 'TOKENTAP_ERR_WORKER_EXITED'),
      (l) => l.length >= held,
    )
    t.same(lines.map((l) => l.request_id).sort(), broken, 'one log line each, with the reason')
    t.ok(
      lines.every((l) => l.error_detail === 'SIGKILL' && l.outcome === 'error' && l.responses === 1),
      'naming the signal and the responses cut',
    )
    const series = await firstEvent(`${adminUrl}/live/events`, (msg) => {
      const rt = msg.realtime as { series: { route: string; model: string; error: number[] }[] }
      const s = rt.series.find((x) => x.route === '/sim' && x.model === 'gpt-realtime')
      return s !== undefined && s.error[0] >= held ? s : undefined
    })
    t.equal(series.error[0], held, 'the live page counts the cut responses as errors')

    // The other worker's sessions end normally (the client leaves mid-response: cancelled); then none is in flight.
    const rest = clients.filter((_, i) => !closedAt.has(ids[i]))
    for (const c of rest) c.ws.close(1000)
    await Promise.all(rest.map((c) => c.closed))
    const end = await scraper.until('every session counted', (m) => sumOf(m, 'llm_realtime_sessions_total') >= N + 1)
    t.equal(sumOf(end, 'llm_realtime_sessions_total', labels), N + 1, 'every session counted once')
    t.equal(sumOf(end, 'llm_realtime_sessions_total', { ...labels, outcome: 'error' }), held)
    t.same(
      select(end, 'llm_realtime_sessions_in_flight')
        .map((s) => s.value)
        .filter((v) => v !== 0),
      [],
      'in flight returns to 0',
    )
    t.equal(sumOf(end, 'llm_realtime_responses_total', labels), N + 1, 'every response counted once')
    t.equal(sumOf(end, 'llm_realtime_responses_total', { ...labels, error_type: 'worker_exited' }), held)
    t.equal(sumOf(end, 'llm_realtime_time_to_first_token_seconds_count', labels), N + 1)

    await eventually(
      'the replacement worker ready',
      async () => (await fetch(`${adminUrl}/readyz`)).status,
      (s) => s === 200,
      300_000,
    )
    await scraper.next()
    await scraper.stop()
    t.ok(atKill >= 2 && scraper.scrapes > atKill + 2, `${scraper.scrapes} scrapes, ${atKill} before the death`)
    t.same(scraper.failed, [], 'every scrape answered, the one during the death too')
    t.same(scraper.decreases, [], 'no counter-like sample of any family went down or vanished')
    t.ok(scraper.families().has('llm_realtime_responses_total'))
  },
)
