import { performance } from 'node:perf_hooks'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { validateConfig } from '../../src/config/load-config.ts'
import { nativeOptions } from '../../src/metrics/prometheus/histogram.ts'
import type { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import { LlmMetrics } from '../../src/metrics/llm/llm-metrics.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import { REPORTED_PHASES } from '../../src/parsers/reported-times.ts'

/**
 * The exposition of a fully used label-set budget at the defaults, in the worst case: every
 * label set (provider × model × route × tenant) has every series any request could give it
 * (each outcome, the usual error statuses, each token source, each overhead and reported
 * phase, both cache directions, both SLO verdicts, parse errors and usage injections).
 * `npm run bench:lab -- label-budget [--sets N] [--scrapes 10]`: series, bytes
 * and ms per scrape in the three formats, one process (docs/metrics.md, "Label caps and the
 * series budget").
 */

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : process.argv[i + 1]
}
const config = validateConfig({ routes: [{ prefix: '/', upstream: 'http://127.0.0.1' }], metrics: { tenant: { header: 'x-team' } } })
const SETS = Number(arg('--sets', String(config.limits.max_label_sets)))
const SCRAPES = Number(arg('--scrapes', '10'))

/** `llm_requests_total`'s outcome × status combinations of a set in the worst case (each with its one error type). */
const REQUEST_KINDS = [
  ['ok', '200', 'none'],
  ['error', '400', 'upstream_error'],
  ['error', '429', 'upstream_rate_limited'],
  ['error', '500', 'upstream_error'],
  ['error', '502', 'upstream_unreachable'],
  ['error', '503', 'upstream_overloaded'],
  ['error', '504', 'upstream_timeout'],
  ['cancelled', '200', 'client_cancelled'],
] as const

const B = DEFAULT_BUCKETS
const metrics = new LlmMetrics(
  { ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap },
  (add) => {
    for (let i = 0; i < SETS; i++) add(setLabels(i), 0)
  },
  { stallSeconds: 1, exemplars: false, labelNames: ['provider', 'model', 'route', 'tenant'], native: nativeOptions(config.metrics.native_histograms) },
)
const registry = new MetricsRegistry({ processMetrics: true, protobuf: true })
for (const m of metrics.all()) registry.register(m)

function setLabels(i: number): string[] {
  return ['openai', `gpt-4o-mini-2024-07-18-ft-${String(i % 100).padStart(4, '0')}`, `/route-${Math.floor(i / 100)}`, `tenant-${String(i).padStart(6, '0')}`]
}

/** A few observations spread over the buckets, as real traffic leaves them. */
function fill(h: Histogram, labels: readonly string[], scale: number): void {
  const s = h.labels(...labels)
  for (let k = 1; k <= 8; k++) s.observe(scale * k * k)
}

const extra = (h: Histogram, labels: readonly string[], more: readonly string[], scale: number) => fill(h, [...labels, ...more], scale)

for (let i = 0; i < SETS; i++) {
  const v = setLabels(i)
  for (const h of [metrics.families.ttft, metrics.families.headers, metrics.families.ttfot, metrics.families.outsideUpstream]) fill(h, v, 0.05)
  for (const h of [metrics.families.itl, metrics.families.interChunk, metrics.families.tpot]) fill(h, v, 0.002)
  fill(metrics.families.tps, v, 2)
  fill(metrics.families.maxGap, v, 0.05)
  fill(metrics.families.tokensPerChunk, v, 1)
  fill(metrics.families.estimateRatio, v, 0.02)
  fill(metrics.families.inputPerRequest, v, 30)
  fill(metrics.families.concurrency, v, 1)
  fill(metrics.families.clientWriteWait, v, 0.005)
  for (const outcome of ['ok', 'error', 'cancelled']) extra(metrics.families.e2e, v, [outcome], 0.5)
  for (const [outcome, status, errorType] of REQUEST_KINDS) metrics.families.requests.labels(...v, outcome, status, errorType).inc(3)
  for (const source of ['usage', 'estimate', 'stream']) {
    metrics.families.outputTokens.labels(...v, source).inc(100)
    extra(metrics.families.outputPerRequest, v, [source], 20)
  }
  for (const phase of ['request', 'first_chunk', 'chunk']) extra(metrics.families.overhead, v, [phase], 0.00002)
  for (const phase of REPORTED_PHASES) extra(metrics.families.upstreamReported, v, [phase], 0.2)
  metrics.families.inputTokens.labels(...v).inc(10)
  for (const cache of ['read', 'write']) metrics.families.cachedInputTokens.labels(...v, cache).inc(5)
  metrics.families.reasoningTokens.labels(...v).inc(5)
  for (const slo of ['met', 'missed']) metrics.families.slo.labels(...v, slo).inc()
  metrics.families.parseErrors.labels(...v).inc()
  metrics.families.usageInjections.labels(...v).inc()
  metrics.families.stalls.labels(...v).inc()
  metrics.families.inFlight.touch(v)
}

async function scrape(format: 'text' | 'openmetrics' | 'protobuf'): Promise<{ bytes: number; ms: number; body: Buffer }> {
  const t0 = performance.now()
  const parts: Buffer[] = []
  const protobuf = registry.protobuf
  const batches = format === 'protobuf' && protobuf !== undefined ? protobuf() : registry.exposition(format === 'openmetrics')
  for await (const batch of batches) for (const b of batch) parts.push(Buffer.from(b))
  const ms = performance.now() - t0
  const body = Buffer.concat(parts)
  return { bytes: body.length, ms, body }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const first = await scrape('text')
const samples = first.body
  .toString('utf8')
  .split('\n')
  .filter((l) => l.startsWith('llm_'))
const series = samples.length
process.stdout.write(`${SETS} label sets: ${series} llm_ series in the text exposition, ${Math.round(series / SETS)} a set (worst case at the default buckets)\n`)
for (const format of ['text', 'openmetrics', 'protobuf'] as const) {
  const ms: number[] = []
  let bytes = 0
  for (let s = 0; s < SCRAPES; s++) {
    const r = await scrape(format)
    ms.push(r.ms)
    bytes = r.bytes
  }
  process.stdout.write(`  ${format}: ${(bytes / 2 ** 20).toFixed(1)} MiB, median ${median(ms).toFixed(0)} ms a scrape (${SCRAPES} scrapes, cached series bytes)\n`)
}
process.stdout.write(`  RSS ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB\n`)
