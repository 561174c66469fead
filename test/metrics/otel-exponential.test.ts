import t from 'tap'
import pino from 'pino'
import { otelHistograms } from '../../src/metrics/otel/config.ts'
import { OtelMetrics } from '../../src/metrics/otel/otel-metrics.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { observationsOf } from '../helpers/observe.ts'
import { pointsOf, startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import type { Point } from '../helpers/otlp-receiver.ts'

const silent = pino({ level: 'silent' })
const REQUEST = { provider: 'openai', model: 'gpt-4o', route: '/v1', method: 'POST', path: '/v1/chat/completions', responseModel: undefined }

/** A finished streamed request: content chunks at [ms, tokens], ended at `tEnd` ms. */
function request(marks: [number, number][], tEnd: number) {
  const chunks = new ChunkLog()
  for (const [at, k] of marks) chunks.add(at, k, MarkKind.text, false)
  return observationsOf(measure({ tReq: 0, tEnd, tHeaders: 5, statusCode: 200, failure: undefined, clientGone: false, chunks, summary: {}, stallSeconds: 1 }), REQUEST)
}

/** Every value's OTel bucket at the point's scale: index i holds (2^(i/2^scale), 2^((i+1)/2^scale)]. */
function otelIndex(value: number, scale: number): number {
  return Math.ceil(Math.log2(value) * 2 ** scale) - 1
}

/** The point's positive buckets as index → count. */
function bucketsOf(p: Point): Map<number, number> {
  const e = p.exponential
  if (e === undefined) throw new Error('not an exponential point')
  const out = new Map<number, number>()
  for (let j = 0; j < e.counts.length; j++) if (e.counts[j] > 0) out.set(e.offset + j, e.counts[j])
  return out
}

t.test('with otel.histograms: exponential every GenAI histogram is exported as ExponentialHistogram points with exact buckets', async (t) => {
  const receiver = await startOtlpReceiver()
  t.teardown(() => receiver.close())
  const otel = new OtelMetrics({ config: { endpoint: receiver.url, headers: {}, histograms: 'exponential' }, logger: silent, env: {} })
  t.teardown(() => otel.shutdown())
  // TTFT 100 ms, gaps 30 and 60 ms; then TTFT 50 ms and one gap of 500 ms.
  otel.record(
    request(
      [
        [100, 1],
        [130, 2],
        [190, 3],
      ],
      200,
    ),
  )
  otel.record(
    request(
      [
        [50, 1],
        [550, 3],
      ],
      600,
    ),
  )
  await otel.flush()
  const e = receiver.received[0]
  const histograms = [...e.metrics].filter(([, m]) => m.monotonicSum !== true)
  t.equal(histograms.length, 6, 'the six GenAI histograms')
  for (const [name, m] of histograms) for (const p of m.points) t.ok(p.exponential !== undefined, `${name} is exponential`)
  const counters = [...e.metrics.values()].filter((m) => m.monotonicSum === true)
  t.ok(counters.length > 0 && counters.every((m) => m.name.startsWith('gen_ai.client.inference.usage.')), 'the usage counters stay Sum points')
  const [gap] = pointsOf(e, 'gen_ai.client.operation.time_per_output_chunk')
  const scale = gap.exponential?.scale as number
  t.equal(scale, 8, 'scale 8: three values fit the 160 buckets at the finest scale')
  t.equal(gap.count, 3)
  t.ok(Math.abs(gap.sum - 0.59) < 1e-9)
  t.same(
    [...bucketsOf(gap).entries()],
    [
      [otelIndex(0.03, scale), 1],
      [otelIndex(0.06, scale), 1],
      [otelIndex(0.5, scale), 1],
    ],
    'each gap in the OTel bucket that holds it',
  )
  t.equal(gap.exponential?.zeroCount, 0)
  t.equal(gap.min, 0.03)
  t.equal(gap.max, 0.5)
  const [usage] = pointsOf(e, 'gen_ai.client.operation.duration')
  t.equal(usage.count, 2)
})

t.test('past 160 buckets the scale is lowered, and nothing is lost', async (t) => {
  const receiver = await startOtlpReceiver()
  t.teardown(() => receiver.close())
  const otel = new OtelMetrics({ config: { endpoint: receiver.url, headers: {}, histograms: 'exponential' }, logger: silent, env: {} })
  t.teardown(() => otel.shutdown())
  // 300 requests of E2E from 1 ms to ~20 s: far more than 160 buckets at scale 8.
  for (let i = 0; i < 300; i++) otel.record(request([[1, 1]], 1 + 1.034 ** i))
  await otel.flush()
  const [duration] = pointsOf(receiver.received[0], 'gen_ai.client.operation.duration')
  const ex = duration.exponential
  t.ok(ex !== undefined && ex.counts.length <= 160, `${ex?.counts.length} buckets within the SDK's default size of 160`)
  t.ok(ex !== undefined && ex.scale < 8, `scale lowered to ${ex?.scale}`)
  t.equal(
    ex?.counts.reduce((a, b) => a + b, 0),
    300,
    'every observation is in a bucket',
  )
})

t.test('the standard variable picks exponential points when otel.histograms is unset; the key wins over it', async (t) => {
  const env = { OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION: 'base2_exponential_bucket_histogram' }
  t.equal(otelHistograms({ headers: {} }, env), 'exponential')
  t.equal(otelHistograms({ headers: {}, histograms: 'explicit' }, env), 'explicit')
  t.equal(otelHistograms({ headers: {} }, { OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION: 'explicit_bucket_histogram' }), 'explicit')
  t.equal(otelHistograms({ headers: {} }, {}), 'explicit', 'explicit by default, as the SDK')
})
