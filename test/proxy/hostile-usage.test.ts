import t from 'tap'
import type { Test } from 'tap'
import { startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { select, sumOf } from '../helpers/prometheus.ts'
import { chatBody, chatEvent, SSE_HEADERS } from '../helpers/faults.ts'

// Usage numbers and event shapes an upstream controls must never freeze the process, poison a
// counter or switch measuring off for later streams: each case is a real upstream behind a real
// proxy, then /healthz and an ordinary stream through the same process.

/** Three one-token chunks, then a usage-only chunk whose completion_tokens is `count` (raw JSON text). */
const withUsage = (count: string): string =>
  `${chatEvent(' the') + chatEvent(' of') + chatEvent(' and')}data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":${count},"total_tokens":${count}}}\n\ndata: [DONE]\n\n`

async function healthzWithin(proxy: RunningProxy, ms: number): Promise<number> {
  const started = performance.now()
  const res = await fetch(`${proxy.adminUrl}/healthz`, { signal: AbortSignal.timeout(ms) })
  await res.arrayBuffer()
  return performance.now() - started
}

async function stream(proxy: RunningProxy, path: string): Promise<void> {
  const res = await fetch(`${proxy.url}/up${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody() })
  await res.arrayBuffer()
}

async function setup(t: Test, bodies: Record<string, string>): Promise<RunningProxy> {
  const upstream = await startUpstream((req, res) => {
    res.writeHead(200, SSE_HEADERS)
    res.end(bodies[req.url ?? ''] ?? `${chatEvent(' the') + chatEvent(' of')}data: [DONE]\n\n`)
  })
  t.teardown(() => upstream.close())
  const proxy = await startProxy({ routes: [{ prefix: '/up', upstream: upstream.url }] })
  t.teardown(() => proxy.close())
  return proxy
}

t.test('a reported completion_tokens of 1e30 after eight one-token chunks leaves the process answering /healthz within a second', async (t) => {
  // Eight chunks: the reconciliation's float residue for 1e30 was ~1e14 loop turns.
  const eight = chatEvent(' the').repeat(5) + withUsage('1e30')
  const proxy = await setup(t, { '/v1/chat/completions': eight })
  await stream(proxy, '/v1/chat/completions')
  const [line] = await proxy.waitForRequests(1)
  t.ok((await healthzWithin(proxy, 1000)) < 1000, '/healthz answered')
  t.equal(line.output_tokens, 8, "the stream's own count stands in for the bogus one")
  await stream(proxy, '/v1/other')
  const lines = await proxy.waitForRequests(2)
  t.equal(lines[1].output_tokens, 2, 'the next stream is measured as usual')
})

const BOGUS = ['1e309', '-1e309', '-5', String(2 ** 60), '1e24', '1.5', '"12"', 'true', '{}', '[3]', '1000000001'] as const

t.test('no reported usage number poisons the token counters or histograms', async (t) => {
  const bodies: Record<string, string> = {}
  for (const [i, count] of BOGUS.entries()) bodies[`/bogus/${i}`] = withUsage(count)
  bodies['/valid'] = withUsage('5')
  const proxy = await setup(t, bodies)
  for (let i = 0; i < BOGUS.length; i++) await stream(proxy, `/bogus/${i}`)
  await stream(proxy, '/valid')
  const lines = await proxy.waitForRequests(BOGUS.length + 1)
  for (const [i, count] of BOGUS.entries()) {
    t.equal(lines[i].output_tokens, 3, `${count}: the stream's own 3 tokens are recorded`)
  }
  t.equal(lines[BOGUS.length].output_tokens, 5, 'a valid count is used exactly')
  const m = await proxy.scrape()
  t.equal(sumOf(m, 'llm_output_tokens_total'), BOGUS.length * 3 + 5, 'the counter is exact: every bogus request adds its streamed 3')
  t.equal(sumOf(m, 'llm_output_tokens_total', { source: 'usage' }), 5, 'only the valid count is counted as reported')
  t.equal(sumOf(m, 'llm_parse_errors_total'), BOGUS.length, 'each bogus number is one parse error')
  for (const s of m) {
    if (!s.name.startsWith('llm_')) continue
    t.ok(Number.isFinite(s.value) && s.value >= 0, `${s.name}${JSON.stringify(s.labels)} = ${s.value} is finite and not negative`)
  }
  const tps = select(m, 'llm_output_tokens_per_second_sum')
  t.ok(
    tps.every((s) => s.value < 1e7),
    'no absurd TPS was observed',
  )
  const warning = proxy.logs.find((l) => l.level === 40)
  t.match(warning, { reason: /completion_tokens is not a token count/ })
})

/** A plain chat chunk with `n` extra members. */
const wideEvent = (n: number): string => {
  const extra: string[] = []
  for (let i = 0; i < n; i++) extra.push(`"m${i}":${i}`)
  return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini",${extra.join(',')},"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n`
}
/** A plain chat chunk with a member nested `n` deep. */
const deepEvent = (n: number): string =>
  `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","deep":${'{"a":'.repeat(n)}1${'}'.repeat(n)},"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n`

t.test('an event of 10,000 members or nested 10,000 deep does not switch measuring off for later streams', async (t) => {
  const proxy = await setup(t, {
    '/wide': `${wideEvent(10_000).repeat(3)}data: [DONE]\n\n`,
    '/deep': `${deepEvent(10_000).repeat(3)}data: [DONE]\n\n`,
    '/wide-array': `${wideEvent(3)
      .replace('"m0":0', `"m0":[${Array.from({ length: 10_000 }, (_, i) => i).join(',')}]`)
      .repeat(3)}data: [DONE]\n\n`,
  })
  await stream(proxy, '/wide')
  await stream(proxy, '/deep')
  await stream(proxy, '/wide-array')
  for (let i = 0; i < 3; i++) await stream(proxy, '/v1/chat/completions')
  const lines = await proxy.waitForRequests(6)
  t.same(
    lines.slice(3).map((l) => l.output_tokens),
    [2, 2, 2],
    'every later ordinary stream is counted',
  )
  t.equal(sumOf(await proxy.scrape(), 'llm_parse_errors_total', { route: '/up' }) <= 3, true, 'no later stream is a parse error')
  t.equal(lines[0].output_tokens, 3, 'the wide stream itself is counted')
})
