import protobuf from 'protobufjs'
import { performance } from 'node:perf_hooks'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { Histogram } from '../../src/metrics/prometheus/histogram.ts'
import type { HistogramSeries } from '../../src/metrics/prometheus/histogram.ts'
import { histogramMetric } from '../../src/metrics/prometheus/protobuf.ts'
import { repoPath } from '../../test/helpers/paths.ts'
import { round } from '../stats.ts'

/**
 * Which encoder the protobuf exposition uses, measured: tokentap's hand-written writer
 * (src/metrics/prometheus/protobuf-writer.ts) against protobufjs with the official metrics.proto, on the same
 * histogram series (default ITL buckets plus native buckets at schema 3, realistic gaps), each
 * series encoded from its figures to bytes as a scrape does for the series that changed.
 * `npm run bench:lab -- protobuf-encoder [--series 1000] [--rounds 30]`.
 */

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : process.argv[i + 1]
}
const SERIES = Number(arg('--series', '1000'))
const ROUNDS = Number(arg('--rounds', '30'))

let seed = 42
const random = (): number => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31
  return seed / 2 ** 31
}

const family = new Histogram({
  name: 'llm_inter_token_latency_seconds',
  help: 'ITL',
  labelNames: ['provider', 'model', 'route'],
  buckets: DEFAULT_BUCKETS.itl,
  native: { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 },
})
const series: HistogramSeries[] = []
for (let i = 0; i < SERIES; i++) {
  const s = family.labels('openai', `gpt-4o-mini-ft-${i}`, '/v1/chat/completions')
  for (let j = 0; j < 200; j++) s.observe(0.005 + random() * random() * 0.5, 1 + Math.floor(random() * 3))
  if (i % 10 === 0) s.observe(1.2 + random())
  series.push(s)
}

const root = new protobuf.Root()
root.loadSync(repoPath('test', 'fixtures', 'prometheus', 'metrics.proto'), { keepCase: true })
const Metric = root.lookupType('io.prometheus.client.Metric')

/** The same message as plain objects, the way a protobufjs encoder is fed. */
function viaProtobufjs(s: HistogramSeries): Uint8Array {
  const core = s.core
  const bucket: { cumulative_count: number; upper_bound: number }[] = []
  let cumulative = 0
  for (let i = 0; i < s.counts.length; i++) {
    cumulative += s.counts[i]
    bucket.push({ cumulative_count: cumulative, upper_bound: i < family.buckets.length ? family.buckets[i] : Number.POSITIVE_INFINITY })
  }
  const positive_span: { offset: number; length: number }[] = []
  const positive_delta: number[] = []
  let last: number | undefined
  let previous = 0
  core.forEachBucket((index, c) => {
    if (last === undefined || index !== last + 1) positive_span.push({ offset: last === undefined ? index : index - last - 1, length: 1 })
    else positive_span[positive_span.length - 1].length++
    positive_delta.push(c - previous)
    previous = c
    last = index
  })
  const message = {
    label: family.labelNames.map((name, i) => ({ name, value: s.labelValues[i] })),
    histogram: {
      sample_count: core.count,
      sample_sum: core.sum,
      bucket,
      schema: core.schema,
      zero_threshold: core.zeroThreshold,
      zero_count: core.zeroCount,
      positive_span,
      positive_delta,
    },
  }
  return Metric.encode(message).finish()
}

const viaWriter = (s: HistogramSeries): Uint8Array => histogramMetric(family.labelNames, s.labelValues, s.core, family.buckets, s.exemplars)

function time(encode: (s: HistogramSeries) => Uint8Array): { ms_per_scrape: number; bytes: number } {
  let bytes = 0
  for (const s of series) bytes += encode(s).length
  const runs: number[] = []
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now()
    for (const s of series) encode(s)
    runs.push(performance.now() - t0)
  }
  runs.sort((a, b) => a - b)
  return { ms_per_scrape: round(runs[Math.floor(runs.length / 2)], 3), bytes }
}

// Warm both up before timing either.
time(viaWriter)
time(viaProtobufjs)
console.log(JSON.stringify({ series: SERIES, rounds: ROUNDS, node: process.version, hand_written: time(viaWriter), protobufjs: time(viaProtobufjs) }, null, 2))
