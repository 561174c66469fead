import t from 'tap'
import OpenAI from 'openai'
import { simPlan, simRoute, startProxy } from '../helpers/proxy.ts'
import type { RunningProxy } from '../helpers/proxy.ts'
import { decodeFamilies, labelsOf, nativeBuckets } from '../helpers/protobuf-metrics.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import { validateConfig } from '../../src/config/load-config.ts'

/** What Prometheus 2.x sends with `--enable-feature=native-histograms`. */
const NATIVE_ACCEPT =
  'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'

async function stream(proxy: RunningProxy): Promise<void> {
  const client = new OpenAI({ baseURL: `${proxy.url}/sim/v1`, apiKey: 'sk-test' })
  // After the first token: one chunk of 4 tokens, one of 1: ITL counts 5 observations.
  const s = await client.chat.completions.create(
    { model: 'gpt-4o', messages: [], stream: true },
    simPlan({
      ttft_ms: 5,
      first_tokens: 1,
      chunks: [
        [20, 4],
        [10, 1],
      ],
    }),
  )
  for await (const _ of s) void _
}

t.test('a scraper that prefers protobuf gets every llm_ histogram as a native histogram with its classic buckets beside it', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { exemplars: true } })
  t.teardown(() => proxy.close())
  await stream(proxy)
  await proxy.waitForRequests(1)
  const res = await fetch(`${proxy.adminUrl}/metrics`, { headers: { accept: NATIVE_ACCEPT } })
  t.equal(res.headers.get('content-type'), 'application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited')
  t.match(res.headers.get('vary') ?? '', /accept/)
  const families = decodeFamilies(new Uint8Array(await res.arrayBuffer()))
  const histograms = families.filter((f) => f.name.startsWith('llm_') && f.type === 'HISTOGRAM')
  t.ok(histograms.length >= 10, `${histograms.length} llm_ histogram families`)
  for (const f of histograms) for (const m of f.metric) t.equal(m.histogram?.schema, 3, `${f.name}{${JSON.stringify(labelsOf(m))}} is native at schema 3`)
  const itl = families.find((f) => f.name === 'llm_inter_token_latency_seconds')?.metric[0].histogram
  if (itl === undefined) throw new Error('no ITL histogram')
  t.equal(itl.sample_count, 5, 'token-weighted: 4 + 1 observations')
  t.equal([...nativeBuckets(itl).values()].reduce((a, b) => a + b, 0) + (itl.zero_count ?? 0), 5, 'the native buckets hold all 5')
  t.equal(itl.bucket.at(-1)?.cumulative_count, 5, 'the classic buckets too')
  t.ok(itl.exemplars.length >= 1, 'the native histogram carries exemplars')
  t.ok(
    families.some((f) => f.name === 'llm_requests_total' && f.type === 'COUNTER'),
    'counters are there',
  )

  const text = await (await fetch(`${proxy.adminUrl}/metrics`, { headers: { accept: 'text/plain;version=0.0.4' } })).text()
  t.equal(sumOf(parseMetrics(text), 'llm_inter_token_latency_seconds_count'), 5, 'the text format is unchanged for a scraper that asks for it')
})

t.test('with native histograms off, a protobuf scraper gets the text format', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], metrics: { native_histograms: { enabled: false } } })
  t.teardown(() => proxy.close())
  const res = await fetch(`${proxy.adminUrl}/metrics`, { headers: { accept: NATIVE_ACCEPT } })
  t.match(res.headers.get('content-type'), /^application\/openmetrics-text/, 'its next choice, OpenMetrics')
  await res.text()
})

t.test('metrics.native_histograms: on by default at schema 3 with 160 buckets; a bad value stops start-up naming the key', async (t) => {
  const c = validateConfig({ routes: [simRoute()] })
  t.same(c.metrics.native_histograms, { enabled: true, schema: 3, zero_threshold: 2 ** -128, bucket_limit: 160 })
  t.throws(() => validateConfig({ routes: [simRoute()], metrics: { native_histograms: { schema: 9 } } }), /metrics\.native_histograms\.schema/)
  t.throws(() => validateConfig({ routes: [simRoute()], metrics: { native_histograms: { bucket_limit: 0 } } }), /metrics\.native_histograms\.bucket_limit/)
  t.throws(() => validateConfig({ routes: [simRoute()], otel: { histograms: 'sparse' } }), /otel\.histograms/)
})
