import { fork } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { get } from 'node:http'
import { PerformanceObserver, performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import { metricsRoute } from '../../src/admin/metrics-route.ts'
import { DEFAULT_BUCKETS } from '../../src/config/schema.ts'
import { LlmMetrics } from '../../src/metrics/llm/llm-metrics.ts'
import { MetricsRegistry } from '../../src/metrics/prometheus/registry.ts'
import type { MetricsSource } from '../../src/metrics/prometheus/source.ts'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { measure } from '../../src/timing/measurement.ts'
import { RecordPolicy } from '../../src/record/observations.ts'
import { round, summary } from '../stats.ts'

/**
 * The exposition's own cost, in one process, without the proxy, simulator or load generator:
 * `npm run bench:lab -- scrape-micro [--series 1000,2000] [--scrapes 300]
 * [--dirty 20|all] [--text] [--exemplars] [--http] [--cpu-prof]`.
 * Fills a registry with the llm_ families as requests for many models would (realistic labels,
 * default buckets), then per scrape records `--dirty` requests for random models (what 10
 * concurrent streams finish between two scrapes) and consumes `exposition()` whole. Reports CPU
 * and wall ms per scrape, and the longest synchronous run the scrape held the event loop for
 * (a setImmediate chain beside it measures the longest gap between its turns, in wall and CPU time).
 * `--http`: the same through the admin route on a real listener, read by a child process
 * (CPU is this process's: rendering plus the HTTP writes; wall ms is the child's, request to
 * whole body).
 */

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i < 0 ? dflt : process.argv[i + 1]
}
const SERIES = arg('--series', '1000,2000').split(',').map(Number)
const SCRAPES = Number(arg('--scrapes', '300'))
/** `all`: one request per model between scrapes, as Prometheus' 15 s interval sees a busy proxy. */
const DIRTY_ARG = arg('--dirty', '20')
const DIRTY = DIRTY_ARG === 'all' ? -1 : Number(DIRTY_ARG)

/** The requests that end between two scrapes. */
function between(m: LlmMetrics, models: number): void {
  if (DIRTY < 0) for (let i = 0; i < models; i++) record(m, i)
  else for (let k = 0; k < DIRTY; k++) record(m, Math.floor(random() * models))
}
const OPENMETRICS = !process.argv.includes('--text')
const EXEMPLARS = process.argv.includes('--exemplars')
const HTTP = process.argv.includes('--http')

const B = DEFAULT_BUCKETS
const buckets = { ttft: B.ttft, itl: B.itl, inter_chunk: B.itl, tpot: B.itl, e2e: B.e2e, tps: B.tps, max_gap: B.max_gap }
const PROVIDERS = ['openai', 'anthropic', 'gemini', 'bedrock']
const ROUTES = ['/v1/chat/completions', '/anthropic/v1/messages', '/gemini/v1beta/models']

/** A seeded generator, so before/after runs record the same requests. */
function rng(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let x = Math.imul(s ^ (s >>> 15), 1 | s)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}
const random = rng(42)

const modelLabels = (i: number) => ({ provider: PROVIDERS[i % PROVIDERS.length], model: `gpt-4o-mini-2024-07-18-ft-${String(i).padStart(4, '0')}`, route: ROUTES[i % ROUTES.length] })

let requestId = 0
const policy = new RecordPolicy({ maxModelsPerRoute: 100_000, lengthBandLabel: false, genAi: false })
/** One finished request for model `i`: a few content chunks with realistic gaps, usage, overheads. */
function record(m: LlmMetrics, i: number): void {
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
    statusCode: random() < 0.02 ? 500 : 200,
    failure: undefined,
    clientGone: false,
    chunks: log,
    summary: { usage: { output: chunks * 2, input: 100 + Math.floor(random() * 4000) } },
    stallSeconds: 1,
  })
  const labels = modelLabels(i)
  const who = {
    id: `req-${++requestId}`,
    route: { label: labels.route },
    provider: labels.provider,
    method: 'POST',
    path: '/v1/chat/completions',
    model: labels.model,
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

const histogramSeries = (m: LlmMetrics): number => m.all().reduce((n, x) => n + (x.type === 'histogram' ? x.seriesCount : 0), 0)

/**
 * The longest gap between turns of a setImmediate chain while it runs: the longest synchronous
 * run beside it, as wall time (what a stream's next chunk waits, preemption by other processes
 * included) and as this process's CPU time over that gap (the run itself, whatever the load).
 */
function loopProbe(): { stop(): { wall: number; cpu: number } } {
  let last = performance.now()
  let lastCpu = process.cpuUsage()
  let longest = 0
  let longestCpu = 0
  let on = true
  const tick = (): void => {
    const now = performance.now()
    const cpu = process.cpuUsage(lastCpu)
    if (now - last > longest) longest = now - last
    const used = (cpu.user + cpu.system) / 1000
    if (used > longestCpu) longestCpu = used
    last = now
    lastCpu = process.cpuUsage()
    if (on) setImmediate(tick)
  }
  setImmediate(tick)
  return {
    stop() {
      on = false
      return { wall: longest, cpu: longestCpu }
    },
  }
}

interface Figures {
  series: number
  bytes: number
  cpu_ms: ReturnType<typeof summary>
  /** The kernel's part of it (the socket writes). */
  sys_ms: ReturnType<typeof summary>
  wall_ms: ReturnType<typeof summary>
  longest_sync_ms: ReturnType<typeof summary>
  longest_sync_cpu_ms: ReturnType<typeof summary>
  /** `--http`: the reading process's CPU per scrape (parsing the chunked body). */
  reader_cpu_ms?: ReturnType<typeof summary>
}

/** One scrape: its bytes, its wall ms, and the reader's CPU ms when another process read it. */
interface Scrape {
  readonly bytes: number
  readonly ms: number
  readonly readerCpu?: number
}

/** SCRAPES scrapes after 20 unmeasured ones, the series changed between them as streams end: this process's CPU, the wall time, the longest synchronous run. */
async function timeScrapes(m: LlmMetrics, models: number, scrape: () => Promise<Scrape>): Promise<Figures> {
  const cpu: number[] = []
  const sys: number[] = []
  const wall: number[] = []
  const reader: number[] = []
  const longest: number[] = []
  const longestCpu: number[] = []
  let bytes = 0
  for (let s = -20; s < SCRAPES; s++) {
    // Between scrapes, as streams end: the next scrape renders these series anew.
    between(m, models)
    const probe = loopProbe()
    const c0 = process.cpuUsage()
    const r = await scrape()
    const c = process.cpuUsage(c0)
    // One more turn so the probe sees the last slice.
    await new Promise((resolve) => setImmediate(resolve))
    const l = probe.stop()
    if (s < 0) continue
    bytes = r.bytes
    cpu.push((c.user + c.system) / 1000)
    sys.push(c.system / 1000)
    wall.push(r.ms)
    if (r.readerCpu !== undefined) reader.push(r.readerCpu)
    longest.push(l.wall)
    longestCpu.push(l.cpu)
  }
  return {
    series: histogramSeries(m),
    bytes,
    cpu_ms: summary(cpu),
    sys_ms: summary(sys),
    wall_ms: summary(wall),
    longest_sync_ms: summary(longest),
    longest_sync_cpu_ms: summary(longestCpu),
    ...(reader.length > 0 ? { reader_cpu_ms: summary(reader) } : {}),
  }
}

function inProcess(registry: MetricsRegistry, m: LlmMetrics, models: number): Promise<Figures> {
  const source: MetricsSource = registry
  return timeScrapes(m, models, async () => {
    const t0 = performance.now()
    let n = 0
    for await (const batch of source.exposition(OPENMETRICS)) {
      for (const b of batch) n += b.length
      // As /metrics does once the socket wrote them.
      source.recycle?.(batch)
    }
    return { bytes: n, ms: performance.now() - t0 }
  })
}

/** The child: GETs /metrics each time the parent says so, reports each scrape's ms (request to whole body). */
function child(url: string): void {
  process.on('message', () => {
    const t0 = performance.now()
    const c0 = process.cpuUsage()
    get(url, { headers: OPENMETRICS ? { accept: 'application/openmetrics-text;version=1.0.0' } : {} }, (res) => {
      let n = 0
      res.on('data', (b: Buffer) => (n += b.length))
      res.on('end', () => {
        const c = process.cpuUsage(c0)
        process.send?.({ ms: performance.now() - t0, bytes: n, cpu: (c.user + c.system) / 1000 })
      })
    })
  })
}

async function overHttp(registry: MetricsRegistry, m: LlmMetrics, models: number): Promise<Figures> {
  const app = Fastify()
  metricsRoute(app, registry)
  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const c: ChildProcess = fork(fileURLToPath(import.meta.url), ['--child', `${address}/metrics`, ...(OPENMETRICS ? [] : ['--text'])])
  const figures = await timeScrapes(m, models, async () => {
    const done = new Promise<{ ms: number; bytes: number; cpu: number }>((resolve) => c.once('message', resolve))
    c.send('go')
    const r = await done
    return { bytes: r.bytes, ms: r.ms, readerCpu: r.cpu }
  })
  c.kill()
  await app.close()
  return figures
}

async function main(): Promise<void> {
  if (process.argv[2] === '--child') return child(process.argv[3])
  for (const want of SERIES) {
    const m = new LlmMetrics(buckets, () => {}, { stallSeconds: 1, exemplars: EXEMPLARS })
    const registry = new MetricsRegistry({ processMetrics: true })
    for (const x of m.all()) registry.register(x)
    let models = 0
    while (histogramSeries(m) < want) record(m, models++)
    // A few requests per model, so every series has several buckets filled.
    for (let i = 0; i < models * 4; i++) record(m, Math.floor(random() * models))
    // GC pauses during the measured scrapes (the warm-up's included: a few of 300).
    let gcCount = 0
    let gcMs = 0
    const gc = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        gcCount++
        gcMs += e.duration
      }
    })
    gc.observe({ entryTypes: ['gc'] })
    const f = HTTP ? await overHttp(registry, m, models) : await inProcess(registry, m, models)
    gc.disconnect()
    const r = (s: ReturnType<typeof summary>) => `p50 ${round(s.p50, 2)} p99 ${round(s.p99, 2)} max ${round(s.max, 2)}`
    process.stdout.write(
      `${f.series} histogram series (${models} models), ${(f.bytes / 2 ** 20).toFixed(2)} MiB, ${OPENMETRICS ? 'OpenMetrics' : 'text'}${EXEMPLARS ? ' with exemplars' : ''}, ${DIRTY < 0 ? 'every model' : DIRTY} requests between scrapes${HTTP ? ', over HTTP' : ''}:\n` +
        `  CPU ms per scrape ${r(f.cpu_ms)} (system p50 ${round(f.sys_ms.p50, 2)}); wall ms ${r(f.wall_ms)}; longest synchronous run ms ${r(f.longest_sync_ms)} (its CPU ms ${r(f.longest_sync_cpu_ms)}); GC ${round(gcMs / (SCRAPES + 20), 2)} ms per scrape (${gcCount} pauses)${f.reader_cpu_ms === undefined ? '' : `; reader CPU ms ${r(f.reader_cpu_ms)}`}\n`,
    )
  }
}

await main()
