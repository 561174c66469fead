import t from 'tap'
import { Histogram } from '../../src/metrics/histogram.ts'
import { LlmMetrics } from '../../src/metrics/llm-metrics.ts'
import { MetricsRegistry } from '../../src/metrics/registry.ts'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { summarize } from '../../src/timing/request-timing.ts'
import { parseMetrics, sumOf } from '../helpers/prometheus.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'

const B = DEFAULT_BUCKETS
const buckets = { ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap }

function record(m: LlmMetrics, model: string, chunks = 4): void {
  const log = new ChunkLog()
  for (let j = 0; j < chunks; j++) log.add(j * 3, 1, MarkKind.text, false)
  m.record({ labels: { provider: 'openai', model, route: '/r' }, outcome: 'ok', statusCode: 200, timing: summarize(-5, 20, log), chunks: log, outputTokens: chunks, outputSource: 'usage', inputTokens: 5 })
}

t.test('a series observed after a scrape shows its new counts in the next scrape', async (t) => {
  const h = new Histogram({ name: 'x_seconds', help: 'x', labelNames: ['a'], buckets: [0.1, 1] })
  const s = h.labels('one')
  s.observe(0.05)
  t.equal(sumOf(parseMetrics(h.serialize()), 'x_seconds_count'), 1)
  t.equal(sumOf(parseMetrics(h.serialize()), 'x_seconds_count'), 1, 'an unchanged series reads the same')
  s.observe(0.5, 3)
  const m = parseMetrics(h.serialize())
  t.equal(sumOf(m, 'x_seconds_count'), 4)
  t.equal(sumOf(m, 'x_seconds_bucket', { le: '1' }), 4)
  t.equal(sumOf(m, 'x_seconds_bucket', { le: '0.1' }), 1)
  h.labels('two').observe(2)
  t.equal(sumOf(parseMetrics(h.serialize()), 'x_seconds_count', { a: 'two' }), 1, 'a series added after a scrape appears')
})

t.test('the collected scrape is the same text as the rendered one, one buffer per series', async (t) => {
  const m = new LlmMetrics(buckets, () => {})
  const registry = new MetricsRegistry({ processMetrics: false })
  for (const x of m.all()) registry.register(x)
  for (let i = 0; i < 300; i++) record(m, `model-${i}`)
  const parts = await registry.collect()
  const text = Buffer.concat(parts).toString('utf8')
  t.equal(text, await registry.render())
  t.ok(parts.length > 1, `${parts.length} buffers`)
  t.ok(parts.every((p) => p.length < 64 * 1024), 'no buffer holds the whole scrape')
  const again1 = await registry.collect()
  t.ok(again1.some((b) => parts.includes(b)), 'series not observed since are not rendered again')
  const samples = parseMetrics(text)
  t.equal(sumOf(samples, 'llm_time_to_first_token_seconds_count'), 300)
  t.equal(sumOf(samples, 'llm_requests_total'), 300)
  record(m, 'model-7', 6)
  const again = parseMetrics(await registry.render())
  t.equal(sumOf(again, 'llm_time_to_first_token_seconds_count', { model: 'model-7' }), 2, 'the re-observed series is rendered again')
  t.equal(sumOf(again, 'llm_inter_chunk_latency_seconds_count', { model: 'model-7' }), 3 + 5)
})

t.test('/metrics serves a scrape of many series completely, with its length', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], limits: { max_models_per_route: 1000 } })
  t.teardown(() => proxy.close())
  const m = proxy.app.tokentap.metrics
  for (let i = 0; i < 500; i++) record(m, `model-${i}`)
  const res = await fetch(`${proxy.adminUrl}/metrics`)
  const text = await res.text()
  t.equal(Number(res.headers.get('content-length')), Buffer.byteLength(text))
  t.match(res.headers.get('content-type') ?? '', /text\/plain/)
  const samples = parseMetrics(text)
  t.equal(sumOf(samples, 'llm_time_to_first_token_seconds_count'), 500)
  t.equal(sumOf(samples, 'llm_inter_token_latency_seconds_count'), 500 * 3)
  t.ok(samples.some((s) => s.name === 'process_cpu_user_seconds_total'), 'process metrics follow')
})
