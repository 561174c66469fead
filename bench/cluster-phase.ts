import { deserialize, serialize } from 'node:v8'
import { ClusterMetrics, StateReporter, type WorkerMetrics } from '../src/cluster/metrics.ts'
import { DEFAULT_BUCKETS } from '../src/config/schema.ts'
import { LlmMetrics } from '../src/metrics/llm/llm-metrics.ts'
import { MetricsRegistry } from '../src/metrics/prometheus/registry.ts'
import type { MetricsSource } from '../src/metrics/prometheus/source.ts'
import { RecordPolicy } from '../src/record/observations.ts'
import { ChunkLog, MarkKind } from '../src/timing/chunk-log.ts'
import { measure } from '../src/timing/measurement.ts'
import { round } from './stats.ts'
import { spread } from './verdict.ts'

/**
 * The cluster primary's /metrics against one process's at the same label sets, in this process
 * (issue 35; docs/performance.md, "/metrics with workers"): one registry holding every label set
 * against two workers' registries whose reports cross a structured clone (the cluster channel's
 * `serialization: 'advanced'`) into ClusterMetrics, as cluster/primary.ts does on each scrape.
 * CPU per scrape of this process (the workers' and the primary's parts, as a pod pays them).
 */

const DIRTY = 20
const B = DEFAULT_BUCKETS
const BUCKETS = { ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap }
const NATIVE = { schema: 3, zeroThreshold: 2 ** -128, maxBuckets: 160 }
const policy = new RecordPolicy({ maxModelsPerRoute: 1_000_000, lengthBandLabel: false, genAi: false })

/** A seeded generator (mulberry32): both forms record the same requests. */
function rng(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let x = Math.imul(s ^ (s >>> 15), 1 | s)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

/** One finished request of label set `i`: a few content chunks, usage, overheads. */
function record(m: LlmMetrics, i: number, random: () => number): void {
  const log = new ChunkLog()
  const chunks = 2 + Math.floor(random() * 30)
  let at = 50 + random() * 400
  for (let j = 0; j < chunks; j++) {
    log.add(at, 1 + Math.floor(random() * 3), MarkKind.text, false)
    at += random() * 60
  }
  const usage = { output: chunks * 2, input: 100 + Math.floor(random() * 4000) }
  const measurement = measure({ tReq: 0, tEnd: at + 5, tHeaders: 20 + random() * 30, statusCode: 200, failure: undefined, clientGone: false, chunks: log, summary: { usage }, stallSeconds: 1 })
  const request = { id: `req-${i}`, route: { label: `/r${i % 4}` }, provider: 'openai', method: 'POST', path: '/v1/chat/completions', model: `model-${i}`, responseModel: undefined, tReq: 0 }
  const concurrency = 1 + Math.floor(random() * 12)
  const overhead = { request: random() * 0.0005, firstChunk: random() * 0.0002, chunk: random() * 0.0001 }
  const who = { ...request, usageInjected: false, concurrency, overhead, tenant: undefined, bytesIn: 0, bytesOut: 0, extra: undefined, failureDetail: undefined }
  m.record(policy.observe(who, measurement))
}

/** CPU ms of one whole exposition, and its bytes. */
async function cpuOf(body: AsyncIterable<Buffer[]>, source: MetricsSource): Promise<{ cpu: number; bytes: number }> {
  const before = process.cpuUsage()
  let bytes = 0
  for await (const batch of body) {
    for (const b of batch) bytes += b.length
    source.recycle?.(batch)
  }
  const used = process.cpuUsage(before)
  return { cpu: (used.user + used.system) / 1000, bytes }
}

export type ClusterScrapeFigures = Awaited<ReturnType<typeof clusterScrape>>

/** The comparison at `sets` label sets (fewer rounds at the larger scales, which take longer). */
export async function clusterScrape(sets: number) {
  const scrapes = sets >= 4000 ? 5 : sets >= 1000 ? 9 : 21
  // A round at 100 sets is five scrapes of each form: one scrape there is a few ms, within what a garbage collection
  // or the scheduler adds to either side (single scrapes' ratios ran from ×0.3 to ×5), so a round of one told little.
  const per = sets >= 1000 ? 1 : 5
  const llm = (): LlmMetrics => new LlmMetrics(BUCKETS, () => {}, { stallSeconds: 1, exemplars: false, native: NATIVE })
  const one = llm()
  const workers = [llm(), llm()]
  const random1 = rng(7)
  const random2 = rng(7)
  for (let i = 0; i < sets; i++) {
    for (const w of workers) record(w, i, random1)
    for (let k = 0; k < 2; k++) record(one, i, random2)
  }
  const registry = new MetricsRegistry({ processMetrics: false, protobuf: true })
  for (const f of one.all()) registry.register(f)
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
  const cpu = { oneText: [] as number[], onePb: [] as number[], twoText: [] as number[], twoPb: [] as number[] }
  let oneBytes = 0
  let twoBytes = 0
  for (let s = 0; s < scrapes; s++) {
    const sums = { oneText: 0, twoText: 0, onePb: 0, twoPb: 0 }
    for (let k = 0; k < per; k++) {
      between()
      const a = await cpuOf(registry.exposition(false), registry)
      const c = await cpuOf(cluster.exposition(false), cluster)
      sums.oneText += a.cpu / per
      sums.twoText += c.cpu / per
      oneBytes = a.bytes
      twoBytes = c.bytes
      between()
      sums.onePb += (await cpuOf((registry.protobuf as () => AsyncIterable<Buffer[]>)(), registry)).cpu / per
      sums.twoPb += (await cpuOf(cluster.protobuf(), cluster)).cpu / per
    }
    cpu.oneText.push(sums.oneText)
    cpu.twoText.push(sums.twoText)
    cpu.onePb.push(sums.onePb)
    cpu.twoPb.push(sums.twoPb)
  }
  const median = (xs: number[]): number => round(spread(xs).median, 1)
  const oneF = { text_cpu_ms: median(cpu.oneText), protobuf_cpu_ms: median(cpu.onePb), text_bytes: oneBytes }
  const twoF = { text_cpu_ms: median(cpu.twoText), protobuf_cpu_ms: median(cpu.twoPb), text_bytes: twoBytes }
  return {
    label_sets: sets,
    series: one.all().reduce((n, f) => n + f.seriesCount, 0),
    one: oneF,
    workers_2: twoF,
    /** The medians' ratio, workers: 2 over one, and each round's (the verdict's rounds: a scrape, or five at 100 sets). */
    ratio: { text: round(twoF.text_cpu_ms / oneF.text_cpu_ms, 2), protobuf: round(twoF.protobuf_cpu_ms / oneF.protobuf_cpu_ms, 2) },
    rounds: { text: cpu.twoText.map((v, i) => round(v / cpu.oneText[i], 3)), protobuf: cpu.twoPb.map((v, i) => round(v / cpu.onePb[i], 3)) },
  }
}

export function describeClusterScrape(f: ClusterScrapeFigures): string {
  return `${String(f.label_sets).padStart(5)} label sets (${f.series} series, ${(f.one.text_bytes / 1e6).toFixed(1)} MB text): one process ${f.one.text_cpu_ms} ms text / ${f.one.protobuf_cpu_ms} ms protobuf; workers: 2 ${f.workers_2.text_cpu_ms} / ${f.workers_2.protobuf_cpu_ms} ms (×${f.ratio.text} / ×${f.ratio.protobuf})`
}
