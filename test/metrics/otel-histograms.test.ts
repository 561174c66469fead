import t from 'tap'
import pino from 'pino'
import { ValueType } from '@opentelemetry/api'
import type { Attributes } from '@opentelemetry/api'
import { AggregationTemporality, DataPointType, InMemoryMetricExporter, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics'
import type { DataPoint, Histogram, MetricData } from '@opentelemetry/sdk-metrics'
import { OtelMetrics, PER_TOKEN_BOUNDS, TOKEN_BOUNDS } from '../../src/metrics/otel/otel-metrics.ts'
import { HistogramCell, PreAggregatedMetrics } from '../../src/metrics/otel/producer.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { HistogramCore } from '../../src/histogram/histogram-core.ts'
import { observationsOf, testPolicy } from '../helpers/observe.ts'
import type { Usage } from '../../src/parsers/types.ts'
import { parseLitellm, PriceTable } from '../../src/cost/price-table.ts'

/** A reader the test collects from by hand (the SDK's histograms, for comparison). */
class HandReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

interface Side {
  record(value: number, attributes: Attributes): void
  collect(): Promise<MetricData[]>
}

const NAME = 'gen_ai.test'

/** The SDK's own histogram with the same bounds, limit and temporality. */
function sdkSide(bounds: number[], valueType: ValueType, limit: number, temporality: AggregationTemporality): Side {
  const reader = new HandReader({ cardinalitySelector: () => limit, aggregationTemporalitySelector: () => temporality })
  const provider = new MeterProvider({ readers: [reader] })
  const h = provider.getMeter('tokentap').createHistogram(NAME, { unit: 's', valueType, advice: { explicitBucketBoundaries: bounds } })
  return {
    record: (v, a) => h.record(v, a),
    collect: async () => (await reader.collect()).resourceMetrics.scopeMetrics.flatMap((s) => s.metrics),
  }
}

/** The pre-aggregated one; an attribute set's key is its values joined. */
function ourSide(bounds: number[], valueType: ValueType, limit: number, temporality: AggregationTemporality): Side & { producer: PreAggregatedMetrics } {
  const producer = new PreAggregatedMetrics({ scope: 'tokentap', limit, temporality: () => temporality })
  const h = producer.histogram({ name: NAME, unit: 's', description: '', bounds, valueType })
  return {
    producer,
    record: (v, a) => h.cell(Object.values(a).join('\u0000'), a).add(v),
    collect: async () => (await producer.collect()).resourceMetrics.scopeMetrics.flatMap((s) => s.metrics),
  }
}

/** A metric's points as comparable values: attributes, buckets, count, sum, min, max (sorted by attributes). */
function pointsOf(metrics: MetricData[]): unknown[] {
  const m = metrics.find((x) => x.descriptor.name === NAME)
  if (m === undefined) return []
  return (m.dataPoints as DataPoint<Histogram>[])
    .map((p) => ({
      attributes: p.attributes,
      counts: [...p.value.buckets.counts],
      boundaries: [...p.value.buckets.boundaries],
      count: p.value.count,
      sum: p.value.sum,
      min: p.value.min,
      max: p.value.max,
    }))
    .sort((a, b) => JSON.stringify(a.attributes).localeCompare(JSON.stringify(b.attributes)))
}

const model = (m: string): Attributes => ({ 'gen_ai.request.model': m })

t.test('a cell: inclusive upper bounds, negative and non-finite values dropped, INT values truncated, runs added at once', async (t) => {
  const c = new HistogramCell({}, new HistogramCore({ bounds: Float64Array.of(0.01, 0.1, 1) }), false, [0, 0])
  for (const v of [0, 0.01, 0.010001, 0.1, 1, 1.5, -0.001, Number.NaN, Number.POSITIVE_INFINITY]) c.add(v)
  t.same(Array.from(c.counts), [2, 2, 1, 1], '0 and 0.01 in (−∞, 0.01], 0.010001 and 0.1 in (0.01, 0.1], 1 in (0.1, 1], 1.5 above')
  t.equal(c.count, 6)
  t.equal(c.sum, 0 + 0.01 + 0.010001 + 0.1 + 1 + 1.5)
  t.equal(c.core.min, 0)
  t.equal(c.core.max, 1.5)
  c.add(0.05, 4)
  t.same(Array.from(c.counts), [2, 6, 1, 1], 'a run of four equal gaps')
  t.equal(c.count, 10)
  t.equal(c.sum, 0 + 0.01 + 0.010001 + 0.1 + 1 + 1.5 + 0.05 * 4)

  const ints = new HistogramCell({}, new HistogramCore({ bounds: Float64Array.of(1, 4, 16) }), true, [0, 0])
  for (const v of [4.9, 5, 1, 16.5]) ints.add(v)
  t.same(Array.from(ints.counts), [1, 1, 2, 0], '4.9 counts as 4, 16.5 as 16')
  t.equal(ints.sum, 4 + 5 + 1 + 16)
  t.equal(ints.core.max, 16)
})

/** Values across the bounds, on both sides of some, and ones the SDK drops. */
const GAPS = [0, 0.01, 0.0100001, 0.025, 0.3, 0.3, 2.5, 2.6, 100, -1, Number.NaN, 0.075]
const TOKENS = [1, 4, 4.9, 5, 16, 0, 3.2, 70000]

t.test('cumulative: the same points as the SDK histogram, the overflow series at the same limit', async (t) => {
  for (const [bounds, valueType, values] of [
    [PER_TOKEN_BOUNDS, ValueType.DOUBLE, GAPS],
    [TOKEN_BOUNDS, ValueType.INT, TOKENS],
  ] as const) {
    const sdk = sdkSide([...bounds], valueType, 3, AggregationTemporality.CUMULATIVE)
    const ours = ourSide([...bounds], valueType, 3, AggregationTemporality.CUMULATIVE)
    // Five attribute sets against a limit of 3: m1 and m2 keep theirs, m3–m5 share the overflow series.
    values.forEach((v, i) => {
      for (const side of [sdk, ours]) side.record(v, model(`m${(i % 5) + 1}`))
    })
    const want = pointsOf(await sdk.collect())
    t.equal(want.length, 3)
    t.same(pointsOf(await ours.collect()), want, `${valueType === ValueType.INT ? 'INT' : 'DOUBLE'}: buckets, count, sum, min, max and attributes`)
    t.match(want, [{ attributes: model('m1') }, { attributes: model('m2') }, { attributes: { 'otel.metric.overflow': true } }])
  }
})

t.test('delta: each period the same points as the SDK histogram, its limit starting over', async (t) => {
  const sdk = sdkSide([...PER_TOKEN_BOUNDS], ValueType.DOUBLE, 3, AggregationTemporality.DELTA)
  const ours = ourSide([...PER_TOKEN_BOUNDS], ValueType.DOUBLE, 3, AggregationTemporality.DELTA)
  const periods = [['m1', 'm2', 'm3', 'm1'], ['m4', 'm3', 'm5', 'm4'], []]
  const got: unknown[][] = []
  for (const [k, period] of periods.entries()) {
    period.forEach((m, i) => {
      for (const side of [sdk, ours]) side.record(GAPS[(i + k) % GAPS.length], model(m))
    })
    const before = ours.producer.generation
    const want = pointsOf(await sdk.collect())
    got.push(pointsOf(await ours.collect()))
    t.same(got[k], want, `period ${k}`)
    t.equal(ours.producer.generation, before + 1, 'cells handed out before are stale')
  }
  t.match(
    got[1],
    [{ attributes: model('m3') }, { attributes: model('m4'), count: 2 }, { attributes: { 'otel.metric.overflow': true }, count: 1 }],
    'period 1: m4 and m3 are its two sets, m5 overflows',
  )
  t.same(got[2], [], 'an empty period exports nothing')
})

t.test('cumulative past the limit: sets seen before keep their series, later ones stay in the overflow one', async (t) => {
  const ours = ourSide([...PER_TOKEN_BOUNDS], ValueType.DOUBLE, 3, AggregationTemporality.CUMULATIVE)
  for (const m of ['m1', 'm2', 'm3']) ours.record(0.02, model(m))
  await ours.collect()
  // A later period: a new set (m4) goes to the overflow series, as the spec says for cumulative
  // temporality; m1 keeps its own. At most `limit` series, however long the process runs.
  ours.record(0.2, model('m4'))
  ours.record(0.2, model('m1'))
  t.match(pointsOf(await ours.collect()), [
    { attributes: model('m1'), count: 2, sum: 0.02 + 0.2 },
    { attributes: model('m2'), count: 1 },
    { attributes: { 'otel.metric.overflow': true }, count: 2, sum: 0.02 + 0.2 },
  ])
  t.equal(ours.producer.generation, 0, 'cumulative cells are never dropped')
})

/** A finished request on virtual time: content marks at [ms, tokens], t_end, usage. */
function measured(marks: [number, number][], tEnd: number, opts: { clientGone?: boolean; usage?: Usage } = {}) {
  const chunks = new ChunkLog()
  for (const [at, k] of marks) chunks.add(at, k, MarkKind.text, false)
  return measure({
    tReq: 0,
    tEnd,
    tHeaders: 5,
    statusCode: 200,
    failure: undefined,
    clientGone: opts.clientGone ?? false,
    chunks,
    summary: opts.usage === undefined ? {} : { usage: opts.usage },
    stallSeconds: 1,
  })
}

t.test("an ok and a cancelled request of one model: each metric's series as the semantic conventions give them", async (t) => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const otel = new OtelMetrics({ config: { endpoint: 'http://127.0.0.1:9', headers: {}, interval_ms: 3_600_000 }, logger: pino({ level: 'silent' }), env: {}, exporter })
  t.teardown(() => otel.shutdown())
  const labels = { provider: 'openai', model: 'gpt-x', route: '/o' }
  const request = { method: 'POST', path: '/v1/chat/completions', responseModel: 'gpt-x-1' }
  // ok: TTFT 100 ms, gaps 20 ms and 20 ms (a run), E2E 150 ms; 7 input, 3 output tokens reported.
  const ok = measured(
    [
      [100, 1],
      [120, 1],
      [140, 1],
    ],
    150,
    { usage: { input: 7, output: 3 } },
  )
  // cancelled after two chunks: TTFT 50 ms, one gap of 250 ms, E2E 400 ms, no usage (2 streamed tokens).
  const cancelled = measured(
    [
      [50, 1],
      [300, 1],
    ],
    400,
    { clientGone: true },
  )
  for (let i = 0; i < 2; i++) {
    otel.record(observationsOf(ok, { ...labels, ...request }))
    otel.record(observationsOf(cancelled, { ...labels, ...request }))
  }
  await otel.flush()
  const metrics =
    exporter
      .getMetrics()
      .at(-1)
      ?.scopeMetrics.flatMap((s) => s.metrics) ?? []
  /** Each point's attributes, count, sum (to 1e-12) and bucket counts. */
  const points = (name: string) =>
    ((metrics.find((m) => m.descriptor.name === name)?.dataPoints ?? []) as DataPoint<Histogram>[]).map((p) => ({
      attributes: p.attributes,
      count: p.value.count,
      sum: Math.round((p.value.sum ?? Number.NaN) * 1e12) / 1e12,
      counts: p.value.buckets.counts,
    }))
  const base = { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-x', 'gen_ai.response.model': 'gpt-x-1' }
  const failed = { ...base, 'error.type': 'cancelled' }
  t.same(points('gen_ai.client.operation.duration'), [
    { attributes: base, count: 2, sum: 0.3, counts: [0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] },
    { attributes: failed, count: 2, sum: 0.8, counts: [0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0] },
  ])
  t.same(
    points('gen_ai.client.token.usage').map((p) => [p.attributes, p.count, p.sum]),
    [
      [{ ...base, 'gen_ai.token.type': 'input' }, 2, 14],
      [{ ...base, 'gen_ai.token.type': 'output' }, 4, 3 + 2 + 3 + 2],
    ],
    'no error.type on token usage: both requests in one series per token type; the cancelled one reported no input',
  )
  t.same(
    points('gen_ai.client.operation.time_to_first_chunk').map((p) => [p.attributes, p.count, p.sum]),
    [[base, 4, 0.3]],
    'no error.type on the chunk metrics (their attribute tables have none): both requests in one series',
  )
  t.same(
    points('gen_ai.client.operation.time_per_output_chunk').map((p) => [p.attributes, p.count, p.sum, p.counts]),
    [[base, 6, 0.58, [0, 4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]]],
    'the advised bounds of the operation duration: gaps of 20 ms in (0.01, 0.02], 250 ms in (0.16, 0.32]',
  )
  t.same(
    points('gen_ai.server.time_to_first_token').map((p) => [p.attributes, p.count, p.sum]),
    [[base, 2, 0.2]],
    'ok requests only',
  )
  t.same(
    points('gen_ai.server.time_per_output_token').map((p) => [p.attributes, p.count, p.sum]),
    [[base, 2, 0.04]],
    'TPOT 40 ms / 2 tokens, ok requests only',
  )
  t.equal(metrics.find((m) => m.descriptor.name === 'gen_ai.client.token.usage')?.descriptor.valueType, ValueType.INT)
})

t.test('cache and reasoning tokens go to the inference usage counters with modality unknown, and the tenant is an attribute', async (t) => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const otel = new OtelMetrics({ config: { endpoint: 'http://127.0.0.1:9', headers: {}, interval_ms: 3_600_000 }, logger: pino({ level: 'silent' }), env: {}, exporter })
  t.teardown(() => otel.shutdown())
  const policy = testPolicy({ tenant: true })
  const who = { provider: 'anthropic', model: 'claude-x', path: '/v1/messages', responseModel: 'claude-x-1', tenant: 'search' }
  const m = measured([[100, 1]], 150, { usage: { input: 2100, output: 40, cacheRead: 2000, cacheWrite: 64, reasoning: 30 } })
  otel.record(observationsOf(m, who, policy))
  otel.record(observationsOf(m, who, policy))
  otel.record(observationsOf(measured([[100, 1]], 150, { usage: { input: 5, output: 1 } }), { ...who, tenant: 'ads' }, policy))
  await otel.flush()
  const metrics =
    exporter
      .getMetrics()
      .at(-1)
      ?.scopeMetrics.flatMap((s) => s.metrics) ?? []
  const base = { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'anthropic', 'gen_ai.request.model': 'claude-x', 'gen_ai.response.model': 'claude-x-1', 'tokentap.tenant': 'search' }
  const usage = { ...base, 'gen_ai.token.modality': 'unknown' }
  for (const [name, value] of [
    ['gen_ai.client.inference.usage.input_tokens', 4200],
    ['gen_ai.client.inference.usage.output_tokens', 80],
    ['gen_ai.client.inference.usage.cache_read.input_tokens', 4000],
    ['gen_ai.client.inference.usage.cache_write.input_tokens', 128],
    ['gen_ai.client.inference.usage.reasoning.output_tokens', 60],
  ] as const) {
    const metric = metrics.find((x) => x.descriptor.name === name)
    t.equal(metric?.dataPointType, DataPointType.SUM, `${name} is a sum`)
    t.equal(metric?.dataPointType === DataPointType.SUM && metric.isMonotonic, true, `${name} is monotonic`)
    t.equal(metric?.descriptor.unit, '{token}')
    t.same(
      (metric?.dataPoints ?? []).map((p) => [p.attributes, p.value]),
      name.endsWith('usage.input_tokens') || name.endsWith('usage.output_tokens')
        ? [
            [usage, value],
            [{ ...usage, 'tokentap.tenant': 'ads' }, name.endsWith('input_tokens') ? 5 : 1],
          ]
        : [[usage, value]],
      `${name}: the parts only for the tenant whose provider reported them`,
    )
  }
  const duration = metrics.find((x) => x.descriptor.name === 'gen_ai.client.operation.duration')
  t.same(
    (duration?.dataPoints ?? []).map((p) => p.attributes['tokentap.tenant']),
    ['search', 'ads'],
    'every GenAI metric carries the tenant',
  )
})

t.test('with pricing, the cost by kind goes to tokentap.gen_ai.client.cost and the unpriced tokens to their own counter', async (t) => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const otel = new OtelMetrics({ config: { endpoint: 'http://127.0.0.1:9', headers: {}, interval_ms: 3_600_000 }, logger: pino({ level: 'silent' }), env: {}, exporter })
  t.teardown(() => otel.shutdown())
  const prices = new PriceTable('EUR', [parseLitellm('test', { 'claude-x': { input_cost_per_token: 2e-6, output_cost_per_token: 1e-5 } })])
  const policy = testPolicy({ prices })
  const who = { provider: 'anthropic', model: 'claude-x', path: '/v1/messages' }
  // 100 uncached input, 2000 cache reads (billed as input: no read price), 64 writes (no price: unpriced), 40 output.
  const m = measured([[100, 1]], 150, { usage: { input: 2164, output: 40, cacheRead: 2000, cacheWrite: 64 } })
  otel.record(observationsOf(m, who, policy))
  await otel.flush()
  const metrics =
    exporter
      .getMetrics()
      .at(-1)
      ?.scopeMetrics.flatMap((s) => s.metrics) ?? []
  const base = { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'anthropic', 'gen_ai.request.model': 'claude-x' }
  const cost = metrics.find((x) => x.descriptor.name === 'tokentap.gen_ai.client.cost')
  t.equal(cost?.dataPointType === DataPointType.SUM && cost.isMonotonic, true, 'a monotonic sum')
  t.same(
    (cost?.dataPoints ?? []).map((p) => [p.attributes['tokentap.cost.kind'], p.attributes['tokentap.cost.currency'], p.value]),
    [
      ['input', 'EUR', 100 * 2e-6],
      ['output', 'EUR', 40 * 1e-5],
      ['cache_read', 'EUR', 2000 * 2e-6],
    ],
  )
  t.same(cost?.dataPoints[0]?.attributes, { ...base, 'tokentap.cost.kind': 'input', 'tokentap.cost.currency': 'EUR' })
  const unpriced = metrics.find((x) => x.descriptor.name === 'tokentap.gen_ai.client.unpriced_tokens')
  t.same(
    (unpriced?.dataPoints ?? []).map((p) => [p.attributes, p.value]),
    [[{ ...base, 'tokentap.cost.kind': 'cache_write' }, 64]],
  )
})
