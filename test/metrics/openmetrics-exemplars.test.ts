import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import { parseOpenMetrics } from '../helpers/openmetrics.ts'
import type { OmFamily } from '../helpers/openmetrics.ts'

const OM_ACCEPT = 'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'

async function scrapeOm(proxy: RunningProxy): Promise<{ contentType: string | null; text: string; families: OmFamily[] }> {
  const res = await fetch(`${proxy.adminUrl}/metrics`, { headers: { accept: OM_ACCEPT } })
  const text = await res.text()
  return { contentType: res.headers.get('content-type'), text, families: parseOpenMetrics(text) }
}

const family = (families: readonly OmFamily[], name: string): OmFamily | undefined => families.find((f) => f.name === name)

async function stream(proxy: RunningProxy, requestId: string | undefined): Promise<void> {
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  const opts = simPlan({
    ttft_ms: 30,
    first_tokens: 1,
    chunks: [
      [20, 1],
      [40, 2],
    ],
  })
  if (requestId !== undefined) opts.headers['x-request-id'] = requestId
  const s = await client.chat.completions.create({ model: 'gpt-4o', messages: [], stream: true }, opts)
  for await (const _ of s) void _
}

t.test('with exemplars on, an OpenMetrics scrape ties TTFT, ITL and E2E buckets to the request id of the log line', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { exemplars: true } })
  t.teardown(() => proxy.close())
  await stream(proxy, 'req-from-client-1')
  await stream(proxy, undefined)
  const lines = await proxy.waitForRequests(2)
  const generated = lines[1].request_id as string
  t.match(generated, /^tt-/, 'the proxy made up an id for the request that had none')

  const { contentType, text, families } = await scrapeOm(proxy)
  t.equal(contentType, 'application/openmetrics-text; version=1.0.0; charset=utf-8')
  t.ok(text.endsWith('# EOF\n'))
  for (const name of ['llm_time_to_first_token_seconds', 'llm_inter_token_latency_seconds', 'llm_request_duration_seconds', 'llm_stream_max_gap_seconds']) {
    const f = family(families, name)
    const ids = new Set(f?.samples.flatMap((s) => (s.exemplar === undefined ? [] : [s.exemplar.labels.request_id])))
    t.ok(ids.has('req-from-client-1') || ids.has(generated), `${name} carries a request id exemplar`)
    for (const s of f?.samples ?? []) {
      if (s.exemplar === undefined) continue
      t.same(Object.keys(s.exemplar.labels), ['request_id'])
      t.ok(s.exemplar.timestamp !== undefined && Math.abs((s.exemplar.timestamp as number) - Date.now() / 1000) < 120, 'exemplar timestamp is wall-clock seconds')
    }
  }
  // Both requests have the same schedule, so their TTFTs likely share a bucket: the latest wins.
  const ttftIds = family(families, 'llm_time_to_first_token_seconds')?.samples.flatMap((s) => (s.exemplar ? [s.exemplar.labels.request_id] : [])) ?? []
  t.ok(ttftIds.length >= 1 && ttftIds.length <= 2, 'one exemplar per bucket')
  t.ok(ttftIds.every((id) => id === 'req-from-client-1' || id === generated))
  t.notOk(
    family(families, 'llm_inter_chunk_latency_seconds')?.samples.some((s) => s.exemplar),
    'inter-chunk gaps carry none',
  )

  const requests = family(families, 'llm_requests')
  t.equal(requests?.type, 'counter', 'the counter family is named without _total')
  t.equal(requests?.samples[0].name, 'llm_requests_total', 'its sample keeps _total')
  const cpu = family(families, 'process_cpu_user_seconds')
  t.equal(cpu?.type, 'counter', 'prom-client process counters come out right too')
  t.equal(cpu?.samples[0].name, 'process_cpu_user_seconds_total')
  t.equal(family(families, 'nodejs_gc_duration_seconds')?.type, 'histogram')
  t.match(family(families, 'llm_output_tokens')?.help, /source="usage"/, 'a HELP with quotes survives escaping')

  const plain = await proxy.scrapeText()
  t.notMatch(plain, / # \{/, 'the Prometheus text format has no exemplars')
  t.notMatch(plain, /# EOF/)
  t.equal(sumOf(parseMetrics(plain), 'llm_requests_total'), 2)
  t.match(plain, /# TYPE process_cpu_user_seconds_total counter/, 'a text scrape after an OpenMetrics one keeps prom-client names')
})

t.test('a long or odd request id is escaped and cut to the 128-character exemplar limit', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { exemplars: true } })
  t.teardown(() => proxy.close())
  const odd = `q"u\\o-${'é'.repeat(150)}`
  await stream(proxy, odd)
  await proxy.waitForRequests(1)
  const { families } = await scrapeOm(proxy)
  const ex = family(families, 'llm_time_to_first_token_seconds')?.samples.find((s) => s.exemplar)?.exemplar
  t.equal(ex?.labels.request_id, [...odd].slice(0, 118).join(''), 'kept to 118 code points, quotes and backslashes escaped')
})

t.test('with exemplars off, OpenMetrics is still served, without exemplars', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()] })
  t.teardown(() => proxy.close())
  await stream(proxy, 'req-x')
  await proxy.waitForRequests(1)
  const { text, families } = await scrapeOm(proxy)
  t.notMatch(text, / # \{/)
  t.equal(family(families, 'llm_time_to_first_token_seconds')?.samples.filter((s) => s.name.endsWith('_count'))[0].value, 1)
})

t.test('the strict OpenMetrics parser rejects what Prometheus would', async (t) => {
  const ok = '# TYPE a counter\na_total 1 # {request_id="x"} 1 1.5\n# EOF\n'
  t.ok(parseOpenMetrics(ok))
  t.throws(() => parseOpenMetrics('# TYPE a counter\na_total 1\n'), /EOF/)
  t.throws(() => parseOpenMetrics('# TYPE a_total counter\na_total 1\n# EOF\n'), /_total/)
  t.throws(() => parseOpenMetrics('# TYPE a counter\n\na_total 1\n# EOF\n'), /blank/)
  t.throws(() => parseOpenMetrics('# TYPE a gauge\na 1 # {r="x"} 1\n# EOF\n'), /exemplar not allowed/)
  t.throws(() => parseOpenMetrics(`# TYPE a counter\na_total 1 # {r="${'x'.repeat(128)}"} 1\n# EOF\n`), /128/)
  t.throws(() => parseOpenMetrics('# TYPE h histogram\nh_bucket{le="1"} 2 # {r="x"} 3\nh_bucket{le="+Inf"} 2\nh_count 2\nh_sum 1\n# EOF\n'), /outside bucket/)
  t.throws(() => parseOpenMetrics('# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 1\n# EOF\n'), /cumulative/)
  t.throws(() => parseOpenMetrics('# HELP a say "hi"\n# TYPE a gauge\na 1\n# EOF\n'), /double quote/)
  t.throws(() => parseOpenMetrics('# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n# EOF\n'), /outside its family/)
})
