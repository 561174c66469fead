import { deserialize, serialize } from 'node:v8'
import t from 'tap'
import { ClusterMetrics, StateReporter } from '../../src/cluster/metrics.ts'
import type { WorkerMetrics } from '../../src/cluster/metrics.ts'
import { requestIdExemplar } from '../../src/metrics/prometheus/histogram.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import type { OwnMetric } from '../../src/metrics/prometheus/registry.ts'
import { decodeFamilies, labelsOf } from '../helpers/protobuf-metrics.ts'
import { families } from '../helpers/cluster-families.ts'
import type { Families } from '../helpers/cluster-families.ts'

/**
 * The cluster primary's /metrics merges each worker's metric state (cluster/metrics.ts): the
 * result must be exactly what one process that had observed every request would serve, in both
 * text formats, exemplars and native (exponential) buckets included. The states cross the same
 * structured clone as the cluster channel's `serialization: 'advanced'` (v8 serialize).
 */

/** A deterministic spread of values, dyadic (sums are exact in any order, as a float sum of durations is not). */
const sampleValue = (i: number): number => ((i * 37) % 4099) / 1024 + (i % 7) / 65536

/** A worker's families in full, through the same structured clone as the cluster channel. */
const report = (f: Families): WorkerMetrics => ({ families: deserialize(serialize(new StateReporter().report(f.all, undefined).families)) as WorkerMetrics['families'], process: [] })

async function read(stream: AsyncGenerator<Buffer[]>): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const batch of stream) for (const b of batch) parts.push(Buffer.from(b))
  return Buffer.concat(parts)
}

/** One process's /metrics: its families in a registry without process metrics (as the primary's sum of none). */
function registry(metrics: readonly OwnMetric[]): MetricsRegistry {
  const r = new MetricsRegistry({ processMetrics: false, protobuf: true })
  for (const m of metrics) r.register(m)
  return r
}

/**
 * The exposition's lines in order of family, then series: a family lists its series in the order
 * they were created, which in the primary is the order the workers' reports name them.
 */
function lines(text: string): string[] {
  const out: string[] = []
  for (const family of text.split(/^(?=# HELP )/m)) {
    const [head, ...rest] = family.split('\n').filter((line) => line !== '' && line !== '# EOF')
    if (head === undefined) continue
    const bySeries = new Map<string, string[]>()
    for (const line of rest) {
      const key = line
        .replace(/^[^{ ]*/, '')
        .replace(/,?le="[^"]*"/, '')
        .replace(/[ #].*$/, '')
      bySeries.set(key, [...(bySeries.get(key) ?? []), line])
    }
    out.push(head, ...[...bySeries.keys()].sort().flatMap((k) => bySeries.get(k) as string[]))
  }
  return out
}

/** The protobuf exposition decoded, each family's series sorted by their labels. */
function decoded(body: Buffer): unknown[] {
  return decodeFamilies(body).map((f) => ({ ...f, metric: [...f.metric].sort((x, y) => JSON.stringify(labelsOf(x)).localeCompare(JSON.stringify(labelsOf(y)))) }))
}

for (const native of [undefined, { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }, { schema: 8, zeroThreshold: 2 ** -128, maxBuckets: 12 }] as const) {
  const what = native === undefined ? 'classic buckets only' : `native buckets at schema ${native.schema}, at most ${native.maxBuckets}`
  t.test(`merging three workers' metric state equals observing every request in one process (${what})`, async (t) => {
    const one = families(native, new Map([['/a', 3]]))
    const gauges = [new Map([['/a', 1]]), new Map([['/a', 2]]), new Map<string, number>()]
    const workers = gauges.map((g) => families(native, g))
    for (let i = 0; i < 600; i++) {
      const w = workers[(i * 7) % 3]
      const route = i % 4 === 0 ? '/b' : '/a'
      const model = i % 3 === 0 ? 'm1' : 'm2'
      const v = i % 50 === 0 ? 0 : sampleValue(i)
      // Increasing timestamps: the newest exemplar of a bucket is the one observed last.
      const exemplar = requestIdExemplar(`req-${i}`)
      for (const f of [one, w]) {
        f.latency.labels(route, model).observeWithExemplar(v, 1 + (i % 3), exemplar, 1_700_000_000 + i)
        f.requests.labels(route, i % 9 === 0 ? 'error' : 'ok').inc()
      }
    }
    const merged = new ClusterMetrics(async () => ({ reports: workers.map(report), workerIds: [1, 2, 3] }))
    const single = registry(one.all)
    const text = (await read(merged.exposition(true))).toString()
    t.same(lines((await read(merged.exposition(false))).toString()), lines(await single.text(false)), 'the Prometheus text has the same lines')
    t.same(lines(text), lines(await single.text(true)), 'the OpenMetrics text, exemplars included, has the same lines')
    t.match(text, /# \{request_id="req-\d+"\}/, 'exemplars are there')
    const protobuf = decoded(await read(merged.protobuf()))
    t.same(protobuf, decoded(await read((single.protobuf as () => AsyncGenerator<Buffer[]>)())), 'the protobuf exposition, native buckets included, has the same series')
    if (native !== undefined) t.match(JSON.stringify(protobuf), /"positive_span"/, 'native buckets are there')
  })
}

t.test('what a dead worker left adds up with what the live ones report', async (t) => {
  const a = families(undefined, new Map())
  const b = families(undefined, new Map())
  const one = families(undefined, new Map())
  for (let i = 0; i < 40; i++) {
    for (const f of [i % 2 === 0 ? a : b, one]) {
      f.latency.labels('/a', 'm').observe(sampleValue(i))
      f.requests.labels('/a', 'ok').inc()
    }
  }
  let ids = [1, 2]
  const merged = new ClusterMetrics(async () => ({ reports: ids.map((id) => report(id === 1 ? a : b)), workerIds: ids }))
  await read(merged.exposition(false))
  merged.retire(1)
  ids = [2]
  t.same(lines((await read(merged.exposition(false))).toString()), lines(await registry(one.all).text(false)))
})

t.test('a worker that dies keeps what it reported, and a report it sent while the scrape waited is not counted twice', async (t) => {
  const a = families(undefined, new Map())
  const b = families(undefined, new Map())
  let answer: () => Promise<{ reports: WorkerMetrics[]; workerIds: number[] }> = async () => ({ reports: [report(a), report(b)], workerIds: [1, 2] })
  const source = new ClusterMetrics(() => answer())
  const requests = async (): Promise<number> => {
    const parts: Buffer[] = []
    for await (const batch of source.exposition(false)) parts.push(...batch)
    return Number(/llm_requests_total\{route="\/a",outcome="ok"\} (\d+)/.exec(Buffer.concat(parts).toString())?.[1])
  }
  a.requests.labels('/a', 'ok').inc(3)
  b.requests.labels('/a', 'ok').inc(4)
  t.equal(await requests(), 7, 'both workers summed')
  a.requests.labels('/a', 'ok').inc(10)
  // Worker 1 answers the next scrape, then dies before the scrape has every answer.
  const late = report(a)
  answer = async () => {
    source.retire(1)
    return { reports: [late, report(b)], workerIds: [1, 2] }
  }
  t.equal(await requests(), 7, 'the dead worker counts as it was last served, once')
  answer = async () => ({ reports: [report(b)], workerIds: [2] })
  b.requests.labels('/a', 'ok').inc()
  t.equal(await requests(), 8, 'and keeps counting in the sum after it is gone')
})

t.test('a dead worker’s process counters and histograms stay in the sums, its gauges do not; the primary’s own process metrics and families are added', async (t) => {
  const proc = (cpu: number, gc: number, rss: number): WorkerMetrics['process'] => [
    { name: 'process_cpu_seconds_total', help: 'CPU.', type: 'counter', aggregator: 'sum', values: [{ labels: {}, value: cpu }] },
    {
      name: 'nodejs_gc_duration_seconds',
      help: 'GC.',
      type: 'histogram',
      aggregator: 'sum',
      values: [
        { labels: { le: 0.1, kind: 'minor' }, value: gc, metricName: 'nodejs_gc_duration_seconds_bucket' },
        { labels: { le: '+Inf', kind: 'minor' }, value: gc, metricName: 'nodejs_gc_duration_seconds_bucket' },
        { labels: { kind: 'minor' }, value: gc / 100, metricName: 'nodejs_gc_duration_seconds_sum' },
        { labels: { kind: 'minor' }, value: gc, metricName: 'nodejs_gc_duration_seconds_count' },
      ],
    },
    { name: 'process_resident_memory_bytes', help: 'RSS.', type: 'gauge', aggregator: 'sum', values: [{ labels: {}, value: rss }] },
  ]
  const own = families(undefined, new Map())
  own.requests.labels('/a', 'error').inc(2)
  let reports: WorkerMetrics[] = [
    { families: [], process: proc(1, 4, 100) },
    { families: [], process: proc(2, 8, 200) },
  ]
  let ids = [1, 2]
  const source = new ClusterMetrics(async () => ({ reports, workerIds: ids }), { own: own.all, processJson: async () => proc(0.5, 1, 1000) as never })
  const scrape = async (): Promise<Map<string, number>> => {
    const parts: Buffer[] = []
    for await (const batch of source.exposition(false)) parts.push(...batch)
    const out = new Map<string, number>()
    for (const line of Buffer.concat(parts).toString().split('\n'))
      if (line !== '' && !line.startsWith('#')) out.set(line.slice(0, line.lastIndexOf(' ')), Number(line.slice(line.lastIndexOf(' ') + 1)))
    return out
  }
  const before = await scrape()
  t.equal(before.get('process_cpu_seconds_total'), 3.5, 'CPU of both workers and the primary')
  t.equal(before.get('process_resident_memory_bytes'), 1300, 'the group’s memory: the primary’s and the workers’')
  t.equal(before.get('llm_requests_total{route="/a",outcome="error"}'), 2, 'the primary’s own families merged')
  source.retire(1)
  source.retire(1)
  reports = [
    { families: [], process: proc(2.5, 9, 200) },
    { families: [], process: proc(0.25, 1, 50) },
  ]
  ids = [2, 3]
  const after = await scrape()
  t.equal(after.get('process_cpu_seconds_total'), 1 + 2.5 + 0.25 + 0.5, 'the dead worker’s CPU stays in the sum beside its replacement’s')
  t.equal(after.get('nodejs_gc_duration_seconds_count{kind="minor"}'), 4 + 9 + 1 + 1, 'its GC histogram too')
  t.equal(after.get('nodejs_gc_duration_seconds_bucket{le="+Inf",kind="minor"}'), 15)
  t.equal(after.get('process_resident_memory_bytes'), 1250, 'its memory does not')
  const parts: Buffer[] = []
  for await (const batch of source.protobuf()) parts.push(...batch)
  t.ok(Buffer.concat(parts).includes('process_cpu_seconds_total'), 'the protobuf exposition has them too')
})
