import { get } from 'node:http'
import t from 'tap'
import type { Test } from 'tap'
import { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import { LlmMetrics } from '../../src/metrics/llm/llm-metrics.ts'
import { BATCH_BYTES, MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { parseMetrics, select, sumOf } from '../helpers/prometheus.ts'
import type { Sample } from '../helpers/prometheus.ts'
import { parseOpenMetrics } from '../helpers/openmetrics.ts'
import { findTool, run } from '../helpers/tools.ts'
import { simRoute, startProxy } from '../helpers/proxy.ts'
import { observationsOf, testPolicy } from '../helpers/observe.ts'
/** A family's whole exposition as text. */
const exposition = (m: { chunks(openMetrics?: boolean): Iterable<Buffer> }, openMetrics = false): string => Buffer.concat([...m.chunks(openMetrics)]).toString('utf8')

const B = DEFAULT_BUCKETS
const buckets = { ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap }

const policy = testPolicy()

function record(m: LlmMetrics, model: string, chunks = 4): void {
  const log = new ChunkLog()
  for (let j = 0; j < chunks; j++) log.add(j * 3, 1, MarkKind.text, false)
  const measurement = measure({
    tReq: -5,
    tEnd: 20,
    tHeaders: undefined,
    statusCode: 200,
    failure: undefined,
    clientGone: false,
    chunks: log,
    summary: { usage: { output: chunks, input: 5 } },
    stallSeconds: 1,
  })
  m.record(observationsOf(measurement, { model }, policy))
}

t.test('a series observed after a scrape shows its new counts in the next scrape', async (t) => {
  const h = new Histogram({ name: 'x_seconds', help: 'x', labelNames: ['a'], buckets: [0.1, 1] })
  const s = h.labels('one')
  s.observe(0.05)
  t.equal(sumOf(parseMetrics(exposition(h)), 'x_seconds_count'), 1)
  t.equal(sumOf(parseMetrics(exposition(h)), 'x_seconds_count'), 1, 'an unchanged series reads the same')
  s.observe(0.5, 3)
  const m = parseMetrics(exposition(h))
  t.equal(sumOf(m, 'x_seconds_count'), 4)
  t.equal(sumOf(m, 'x_seconds_bucket', { le: '1' }), 4)
  t.equal(sumOf(m, 'x_seconds_bucket', { le: '0.1' }), 1)
  h.labels('two').observe(2)
  t.equal(sumOf(parseMetrics(exposition(h)), 'x_seconds_count', { a: 'two' }), 1, 'a series added after a scrape appears')
})

/** A whole scrape as text. */
async function scrapeText(registry: MetricsRegistry, openMetrics = false): Promise<string> {
  const parts: Buffer[] = []
  for await (const batch of registry.exposition(openMetrics)) parts.push(...batch)
  return Buffer.concat(parts).toString('utf8')
}

t.test('the streamed scrape comes in pieces, the same text scrape after scrape, with unchanged series not rendered again', async (t) => {
  const m = new LlmMetrics(buckets, () => {})
  const registry = new MetricsRegistry({ processMetrics: false })
  for (const x of m.all()) registry.register(x)
  for (let i = 0; i < 300; i++) record(m, `model-${i}`)
  const batches: Buffer[][] = []
  for await (const batch of registry.exposition()) batches.push(batch)
  const text = Buffer.concat(batches.flat()).toString('utf8')
  t.equal(text, await scrapeText(registry), 'an unchanged registry scrapes to the same text')
  t.ok(batches.length > 1, `${batches.length} batches`)
  const sizes = batches.map((b) => b.reduce((n, x) => n + x.length, 0))
  t.ok(
    sizes.every((n) => n <= BATCH_BYTES + 64 * 1024),
    'no batch holds the whole scrape',
  )
  const before = [...m.families.ttft.chunks()]
  const after = [...m.families.ttft.chunks()]
  t.ok(
    after.every((b, i) => b === before[i]),
    'series not observed since are not rendered again',
  )
  const samples = parseMetrics(text)
  t.equal(sumOf(samples, 'llm_time_to_first_token_seconds_count'), 300)
  t.equal(sumOf(samples, 'llm_requests_total'), 300)
  record(m, 'model-7', 6)
  const again = parseMetrics(await scrapeText(registry))
  t.equal(sumOf(again, 'llm_time_to_first_token_seconds_count', { model: 'model-7' }), 2, 'the re-observed series is rendered again')
  t.equal(sumOf(again, 'llm_inter_chunk_latency_seconds_count', { model: 'model-7' }), 3 + 5)
  const reRendered = [...m.families.ttft.chunks()]
  t.equal(reRendered.filter((b, i) => b !== after[i]).length, 1, 'only the re-observed series has new bytes')
})

t.test('OpenMetrics shares the cached bytes of series without exemplars and renders those with exemplars anew', async (t) => {
  const h = new Histogram({ name: 'x_seconds', help: 'x', labelNames: ['a'], buckets: [0.1, 1] })
  h.labels('plain').observe(0.05)
  h.labels('marked').observeWithExemplar(0.5, 1, 'request_id="r1"', 1700000000)
  const text = [...h.chunks(false)]
  const om = [...h.chunks(true)]
  t.equal(om[1], text[1], 'the series without exemplars is the same buffer in both formats')
  t.not(om[2], text[2])
  t.match(om[2].toString(), /le="1"} 1 # \{request_id="r1"\} 0.5 1700000000.000/)
  t.notMatch(text[2].toString(), /#/, 'the Prometheus text has no exemplars')
  t.equal([...h.chunks(true)][2], om[2], 'cached until the next observation')
  h.labels('marked').observeWithExemplar(0.05, 1, 'request_id="r2"', 1700000001)
  t.match([...h.chunks(true)][2].toString(), /le="0.1"} 1 # \{request_id="r2"\}/)
})

/** Label sets of every sample line, per sample name: a duplicate is a series written twice. */
function checkSeries(t: Test, text: string, wantModels: number): void {
  const samples = parseMetrics(text)
  const seen = new Set<string>()
  let duplicates = 0
  for (const s of samples) {
    const key = `${s.name}{${JSON.stringify(s.labels)}}`
    if (seen.has(key)) duplicates++
    seen.add(key)
  }
  t.equal(duplicates, 0, 'every series is in the scrape exactly once')
  // Each histogram series on its own is consistent: buckets never fall, +Inf equals _count.
  let bad = 0
  const buckets = new Map<string, Sample[]>()
  const counts = new Map<string, number>()
  for (const s of samples) {
    const { le, ...rest } = s.labels
    if (s.name.endsWith('_bucket') && le !== undefined) {
      const key = `${s.name.slice(0, -'_bucket'.length)}${JSON.stringify(rest)}`
      const list = buckets.get(key)
      if (list === undefined) buckets.set(key, [s])
      else list.push(s)
    } else if (s.name.endsWith('_count')) counts.set(`${s.name.slice(0, -'_count'.length)}${JSON.stringify(rest)}`, s.value)
  }
  const histograms = buckets.size
  for (const [key, list] of buckets) {
    for (let i = 1; i < list.length; i++) if (list[i].value < list[i - 1].value) bad++
    const inf = list[list.length - 1]
    if (inf.labels.le !== '+Inf' || counts.get(key) !== inf.value) bad++
  }
  t.equal(bad, 0, `all ${histograms} histogram series are consistent`)
  t.equal(new Set(select(samples, 'llm_time_to_first_token_seconds_count').map((s) => s.labels.model)).size, wantModels, 'every model is there')
}

t.test('a scrape streamed while series change and new ones appear is well-formed: each series once, each consistent', async (t) => {
  const m = new LlmMetrics(buckets, () => {})
  const registry = new MetricsRegistry({ processMetrics: true })
  for (const x of m.all()) registry.register(x)
  for (let i = 0; i < 150; i++) record(m, `model-${i}`)
  for (const openMetrics of [false, true]) {
    const parts: Buffer[] = []
    let changed = 0
    for await (const batch of registry.exposition(openMetrics)) {
      parts.push(...batch)
      // Between pieces, as requests end during a scrape: old series change, new ones appear.
      record(m, `model-${(changed * 37) % 150}`, 5)
      record(m, `late-${openMetrics}-${changed}`)
      changed++
    }
    t.ok(changed > 3, `${changed} batches, with changes between them`)
    const text = Buffer.concat(parts).toString('utf8')
    const all = new Set(select(parseMetrics(text), 'llm_time_to_first_token_seconds_count').map((s) => s.labels.model))
    const late = [...all].filter((x) => x.startsWith('late-')).length
    checkSeries(t, text, 150 + late)
    if (openMetrics) {
      t.ok(text.endsWith('# EOF\n'), 'OpenMetrics ends with # EOF once')
      t.equal(text.split('# EOF').length, 2)
      t.doesNotThrow(() => parseOpenMetrics(text), 'a valid OpenMetrics exposition')
    }
    const promtool = findTool(t, 'promtool')
    if (promtool !== undefined && !openMetrics) {
      const lint = run(promtool, ['check', 'metrics'], text)
      t.equal(lint.status, 0, `promtool check metrics: ${lint.output.slice(0, 500)}`)
    }
  }
})

t.test('/metrics streams a scrape of many series completely to a slow reader while the event loop keeps turning', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], limits: { max_models_per_route: 1000 } })
  t.teardown(() => proxy.close())
  const m = proxy.app.tokentap.metrics
  for (let i = 0; i < 200; i++) record(m, `model-${i}`)
  let turns = 0
  let running = true
  const tick = (): void => {
    turns++
    if (running) setImmediate(tick)
  }
  setImmediate(tick)
  const url = new URL(`${proxy.adminUrl}/metrics`)
  const { status, headers, text, reads } = await new Promise<{ status: number; headers: Record<string, unknown>; text: string; reads: number }>((resolve, reject) => {
    get({ host: url.hostname, port: url.port, path: url.pathname }, (res) => {
      const parts: Buffer[] = []
      let n = 0
      res.on('data', (b: Buffer) => {
        parts.push(b)
        n++
        // A reader slower than the writer: the server must wait for it, not buffer the scrape.
        if (n % 8 === 0) {
          res.pause()
          record(m, `model-${n % 200}`, 5)
          setTimeout(() => res.resume(), 2)
        }
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(parts).toString('utf8'), reads: n }))
      res.on('error', reject)
    }).on('error', reject)
  })
  running = false
  t.equal(status, 200)
  t.equal(headers['transfer-encoding'], 'chunked', 'streamed, not built whole first')
  t.match(String(headers['content-type']), /text\/plain/)
  t.ok(reads > 8, `${reads} reads`)
  t.ok(turns > 10, `the event loop turned ${turns} times during the scrape`)
  checkSeries(t, text, 200)
  const samples = parseMetrics(text)
  t.ok(sumOf(samples, 'llm_time_to_first_token_seconds_count') >= 200)
  t.ok(
    samples.some((s) => s.name === 'process_cpu_user_seconds_total'),
    'process metrics follow',
  )
  t.ok(text.endsWith('\n'))
})

t.test('a scraper that leaves mid-scrape stops it, and the next scrape is whole', async (t) => {
  const proxy = await startProxy({ routes: [simRoute()], limits: { max_models_per_route: 1000 } })
  t.teardown(() => proxy.close())
  const m = proxy.app.tokentap.metrics
  for (let i = 0; i < 300; i++) record(m, `model-${i}`)
  const url = new URL(`${proxy.adminUrl}/metrics`)
  await new Promise<void>((resolve) => {
    const req = get({ host: url.hostname, port: url.port, path: url.pathname }, (res) => {
      res.once('data', () => {
        req.destroy()
        resolve()
      })
    })
    req.on('error', () => resolve())
  })
  await new Promise((r) => setTimeout(r, 50))
  const text = await proxy.scrapeText()
  checkSeries(t, text, 300)
})
