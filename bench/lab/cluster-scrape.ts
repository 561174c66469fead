import { deserialize, serialize } from 'node:v8'
import { ClusterMetrics, StateReporter } from '../../src/cluster/metrics.ts'
import type { WorkerMetrics } from '../../src/cluster/metrics.ts'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { LlmMetrics } from '../../src/metrics/llm/llm-metrics.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import type { MetricsSource } from '../../src/metrics/prometheus/source.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { RecordPolicy } from '../../src/record/observations.ts'
import { round } from '../stats.ts'

/**
 * The cluster primary's /metrics against one process's at the same series
 * (`npm run bench:lab -- cluster-scrape [--sets 100,1000,4000] [--json]`). In one process, without sockets: `one` is a registry
 * holding every label set; `workers: 2` is two workers' registries, each with a request of every
 * label set, whose reports (StateReporter: what changed since the last one the primary applied)
 * cross a structured clone (the cluster channel's `serialization: 'advanced'`) into the primary's
 * ClusterMetrics, as cluster.ts does on each scrape. Between two
 * scrapes 20 requests of random label sets finish (the series a busy proxy changes in a scrape
 * interval). CPU per scrape (this process's, user + system: the worker's and the primary's parts
 * together, as a pod pays them), text (Prometheus 0.0.4) and protobuf, median of the scrapes.
 */

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : process.argv[i + 1]
}
const SETS = arg('--sets', '100,1000,4000').split(',').map(Number)
const JSON_OUT = process.argv.includes('--json')
const DIRTY = 20

const B = DEFAULT_BUCKETS
const buckets = { ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap }
const native = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }

/** A seeded generator: both forms record the same requests. */
function rng(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let x = Math.imul(s ^ (s >>> 15), 1 | s)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const policy = new RecordPolicy({ maxModelsPerRoute: 1_000_000, lengthBandLabel: false, genAi: false })

/** One finished request of label set `i`: a few content chunks, usage, overheads. */
function record(m: LlmMetrics, i: number, random: () => number): void {
  const log = new ChunkLog()
  const chunks = 2 + Math.floor(random() * 30)
  let at = 50 + random() * 400
  for (let j = 0; j < chunks; j++) {
    log.add(at, 1 + Math.floor(random() * 3), MarkKind.text, false)
    at += random() * 60
  }
  const measurement = measure({
    tReq: 0,
    tEnd: at + 5,
    tHeaders: 20 + random() * 30,
    statusCode: 200,
    failure: undefined,
    clientGone: false,
    chunks: log,
    summary: { usage: { output: chunks * 2, input: 100 + Math.floor(random() * 4000) } },
    stallSeconds: 1,
  })
  const who = {
    id: `req-${i}`,
    route: { label: `/r${i % 4}` },
    provider: 'openai',
    method: 'POST',
    path: '/v1/chat/completions',
    model: `model-${i}`,
    responseModel: undefined,
    usageInjected: false,
    concurrency: 1 + Math.floor(random() * 12),
    tReq: 0,
    overhead: { request: random() * 0.0005, firstChunk: random() * 0.0002, chunk: random() * 0.0001 },
    tenant: undefined,
    bytesIn: 0,
    bytesOut: 0,
    extra: undefined,
    failureDetail: undefined,
  }
  m.record(policy.observe(who, measurement))
}

const llm = (): LlmMetrics => new LlmMetrics(buckets, () => {}, { stallSeconds: 1, exemplars: false, native })

function registryOf(m: LlmMetrics): MetricsRegistry {
  const r = new MetricsRegistry({ processMetrics: false, protobuf: true })
  for (const f of m.all()) r.register(f)
  return r
}

/** CPU ms of one whole exposition. */
async function cpuOf(run: () => AsyncIterable<Buffer[]>, source: MetricsSource): Promise<{ cpu: number; bytes: number }> {
  const before = process.cpuUsage()
  let bytes = 0
  for await (const batch of run()) {
    for (const b of batch) bytes += b.length
    source.recycle?.(batch)
  }
  const used = process.cpuUsage(before)
  return { cpu: (used.user + used.system) / 1000, bytes }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

interface Figures {
  readonly label_sets: number
  readonly series: number
  readonly one: { text_cpu_ms: number; protobuf_cpu_ms: number; text_bytes: number }
  readonly workers_2: { text_cpu_ms: number; protobuf_cpu_ms: number; text_bytes: number }
  readonly ratio: { text: number; protobuf: number }
}

async function scale(sets: number): Promise<Figures> {
  const scrapes = sets >= 4000 ? 5 : sets >= 1000 ? 9 : 21
  const one = llm()
  const workers = [llm(), llm()]
  const random1 = rng(7)
  const random2 = rng(7)
  // Every label set has a request in each worker, and the same two in the one process.
  for (let i = 0; i < sets; i++) {
    for (const w of workers) record(w, i, random1)
    for (let k = 0; k < 2; k++) record(one, i, random2)
  }
  const registry = registryOf(one)
  const reporters = workers.map(() => new StateReporter())
  const cluster: ClusterMetrics = new ClusterMetrics(async () => ({
    reports: workers.map((w, i) => deserialize(serialize({ ...reporters[i].report(w.all(), cluster.applied(i + 1)), process: [] })) as WorkerMetrics),
    workerIds: [1, 2],
  }))
  const pick = rng(sets)
  const between = (): void => {
    for (let k = 0; k < DIRTY; k++) {
      const i = Math.floor(pick() * sets)
      record(one, i, random2)
      record(workers[k % 2], i, random1)
    }
  }
  const runs = { oneText: [] as number[], onePb: [] as number[], clusterText: [] as number[], clusterPb: [] as number[] }
  let oneBytes = 0
  let clusterBytes = 0
  // Each measured scrape follows the same changes in both forms (a scraper reads one format).
  for (let s = 0; s < scrapes; s++) {
    between()
    const a = await cpuOf(() => registry.exposition(false), registry)
    runs.oneText.push(a.cpu)
    oneBytes = a.bytes
    const c = await cpuOf(() => cluster.exposition(false), cluster)
    runs.clusterText.push(c.cpu)
    clusterBytes = c.bytes
    between()
    runs.onePb.push((await cpuOf(registry.protobuf as () => AsyncIterable<Buffer[]>, registry)).cpu)
    runs.clusterPb.push((await cpuOf(cluster.protobuf, cluster)).cpu)
  }
  const series = one.all().reduce((n, f) => n + f.seriesCount, 0)
  const oneF = { text_cpu_ms: round(median(runs.oneText), 1), protobuf_cpu_ms: round(median(runs.onePb), 1), text_bytes: oneBytes }
  const twoF = { text_cpu_ms: round(median(runs.clusterText), 1), protobuf_cpu_ms: round(median(runs.clusterPb), 1), text_bytes: clusterBytes }
  return { label_sets: sets, series, one: oneF, workers_2: twoF, ratio: { text: round(twoF.text_cpu_ms / oneF.text_cpu_ms, 2), protobuf: round(twoF.protobuf_cpu_ms / oneF.protobuf_cpu_ms, 2) } }
}

const out: Figures[] = []
for (const sets of SETS) {
  const f = await scale(sets)
  out.push(f)
  if (!JSON_OUT)
    process.stdout.write(
      `${String(f.label_sets).padStart(5)} label sets (${f.series} series, ${(f.one.text_bytes / 1e6).toFixed(1)} MB text): one process ${f.one.text_cpu_ms} ms text / ${f.one.protobuf_cpu_ms} ms protobuf; workers: 2 ${f.workers_2.text_cpu_ms} / ${f.workers_2.protobuf_cpu_ms} ms (×${f.ratio.text} / ×${f.ratio.protobuf})\n`,
    )
}
if (JSON_OUT) process.stdout.write(`${JSON.stringify(out)}\n`)
