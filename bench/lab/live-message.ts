import { PerformanceObserver, performance } from 'node:perf_hooks'
import type { PerformanceEntry } from 'node:perf_hooks'
import { ChunkLog, MarkKind } from '../../src/timing/chunk-log.ts'
import { LiveStats } from '../../src/admin/live/live-stats.ts'
import type { FinishedRequest } from '../../src/admin/live/finished-request.ts'
import { buildMessage } from '../../src/admin/live/live-message.ts'
import type { Cursors, InFlight } from '../../src/admin/live/live-message.ts'
import { lengthBandOf } from '../../src/record/labels.ts'

/**
 * The live page's per-second cost: building one server-sent message (buildMessage +
 * JSON.stringify) with 1,000 route × model series and 500 streams in flight, while 500 requests
 * end each second, 40 % of them in the 40 busiest series (so every shown series' quantiles must
 * be recomputed in every message) and the rest across all, and each stream receives 25 content
 * chunks a second. Also the sketches' memory.
 * `npm run bench:lab -- live-message [--series 1000] [--streams 500] [--seconds 60]`
 *
 * Method, so the figure is what the proxy would see: each simulated second records its ended
 * requests (stats.add) and the streams' chunks, yields one event-loop turn, then builds the
 * message, as the proxy's timer does between requests. The collector runs when it would: no
 * forced collection before a build (a full GC before every message moved the 80 MB of sketches
 * and left every read cold; the proxy mostly scavenges). `build_cpu_ms` is process CPU time
 * (all threads, so a concurrent marker's work in the build counts), `build_ms` wall time;
 * `build_gc_ms` the main-thread GC pauses that fell inside a build (perf_hooks 'gc' entries),
 * included in both. `--expose-gc` is used only once, after the 15 minutes of history are
 * filled, so the timed seconds start from a settled heap, not from the fill's garbage.
 */

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`)
  return i < 0 ? dflt : Number(process.argv[i + 1])
}
const SERIES = arg('series', 1000)
const STREAMS = arg('streams', 500)
const SECONDS = arg('seconds', 60)
const ENDED_PER_SECOND = arg('ended', 500)
const CHUNKS_PER_SECOND = 25

/** A deterministic generator (mulberry32), so runs compare. */
function rng(seed: number): () => number {
  let a = seed
  return () => {
    a = (a + 0x6d2b79f5) | 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}
const rand = rng(42)

/** Busiest series: the ones the message shows, each with requests ending every second. */
const BUSY = 40
/**
 * The series of request i: the first SERIES requests create every series; then 40 % go to the
 * BUSY busiest (5 a second each at 500 a second, so every shown series changed since the last
 * message, as the busiest do in production: no second where the shown ones are idle) and the
 * rest spread over all.
 */
const seriesOf = (i: number): number => (i < SERIES ? i : rand() < 0.4 ? Math.floor(rand() * BUSY) : Math.floor(rand() * SERIES))

function request(i: number, endedAt: number): FinishedRequest {
  const k = seriesOf(i)
  const route = `/route-${k % 20}`
  const model = `model-${Math.floor(k / 20)}`
  const n = 20 + Math.floor(rand() * 300)
  const gapSeconds = new Float64Array(n)
  const gapTokens = new Float64Array(n)
  const itl = 0.01 + rand() * 0.04
  for (let j = 0; j < n; j++) {
    gapSeconds[j] = rand() < 0.2 ? 0 : itl * (0.5 + rand())
    gapTokens[j] = rand() < 0.1 ? 3 : 1
  }
  const ttft = 0.1 + rand() * 0.5
  const e2e = ttft + n * itl
  return {
    id: `r${i}`,
    route,
    provider: 'openai',
    model,
    ...(rand() < 0.97 ? { outcome: 'ok', errorType: 'none' } : { outcome: 'error', errorType: 'stream_error' }),
    statusCode: 200,
    ttft,
    ttfot: ttft,
    headers: ttft / 2,
    e2e,
    tpot: itl,
    tps: n / e2e,
    itlP50: itl,
    itlP99: itl * 2,
    maxGap: itl * 3,
    stalls: rand() < 0.02 ? 1 : 0,
    outputTokens: n + 1,
    outputSource: 'usage',
    chunks: n + 1,
    gaps: { count: n, seconds: gapSeconds, tokens: gapTokens, times: new Float64Array(n).fill(1) },
    lengthBand: lengthBandOf(n + 1),
    inputLengthBand: i % 6,
    concurrency: 1 + Math.floor(rand() * 100),
    endedAt,
  }
}

const stats = new LiveStats()
let now = 1_000_000
let next = 0
// 15 minutes of history: every series has requests in every window.
const t0 = performance.now()
for (let s = 0; s < 900; s++) {
  for (let k = 0; k < Math.max(ENDED_PER_SECOND / 5, SERIES / 10); k++) stats.add(request(next++, now - (900 - s) * 1000))
}
const fillMs = performance.now() - t0

const active = new Set<InFlight>()
for (let i = 0; i < STREAMS; i++) {
  const chunks = new ChunkLog()
  const tReq = now - 20_000 * rand()
  for (let at = tReq + 200; at < now; at += 1000 / CHUNKS_PER_SECOND) chunks.add(at, 1, MarkKind.text, false)
  active.add({ id: `s${i}`, route: { label: `/route-${i % 20}` }, provider: 'openai', requestModel: `model-${i % 50}`, tReq, chunks })
}

const cursors: Cursors = new Map()
const times: number[] = []
/** CPU time (ms) of the same: less swayed than wall time by other processes on a shared machine. */
const cpu: number[] = []
/** Per build, its [start, end] (performance.now()), to attribute GC pauses to it. */
const spans: [number, number][] = []
const gcEntries: PerformanceEntry[] = []
const gcObserver = new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcEntries.push(e)
})
// The fill's garbage collected once, before the timed seconds (not before each build).
;(globalThis as { gc?: () => void }).gc?.()
gcObserver.observe({ entryTypes: ['gc'] })
let bytes = 0
let recordMs = 0
for (let s = 0; s < SECONDS; s++) {
  // One second of traffic, then the message.
  const ended: FinishedRequest[] = []
  for (let k = 0; k < ENDED_PER_SECOND; k++) ended.push(request(next++, now + (k * 1000) / ENDED_PER_SECOND))
  const r0 = process.cpuUsage()
  for (const r of ended) stats.add(r)
  const r1 = process.cpuUsage(r0)
  recordMs += (r1.user + r1.system) / 1000
  now += 1000
  for (const ex of active) {
    for (let c = 0; c < CHUNKS_PER_SECOND; c++) ex.chunks.add(now - 1000 + (c * 1000) / CHUNKS_PER_SECOND, 1, MarkKind.text, false)
  }
  // The proxy's timer fires from the event loop, between requests: one turn.
  await new Promise((resolve) => setImmediate(resolve))
  const b0 = performance.now()
  const c0 = process.cpuUsage()
  const text = JSON.stringify(buildMessage(stats, active, now, cursors, 1))
  const c1 = process.cpuUsage(c0)
  const b1 = performance.now()
  times.push(b1 - b0)
  spans.push([b0, b1])
  cpu.push((c1.user + c1.system) / 1000)
  bytes = text.length
}
// 'gc' entries are delivered after the fact.
await new Promise((resolve) => setTimeout(resolve, 100))
gcObserver.disconnect()
const gcInBuild = spans.map(([b0, b1]) => gcEntries.reduce((sum, e) => (e.startTime >= b0 && e.startTime < b1 ? sum + e.duration : sum), 0))
const buildsWithGc = gcInBuild.filter((x) => x > 0).length
const gcTotalMs = gcEntries.reduce((sum, e) => sum + e.duration, 0)
gcInBuild.sort((a, b) => a - b)
times.sort((a, b) => a - b)
cpu.sort((a, b) => a - b)
const pick = (xs: number[], p: number): string => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))].toFixed(2)
const q = (p: number): string => pick(times, p)
// A fixed reference loop (1e7 float adds into a typed array): how slow this machine is right now.
const ref0 = process.cpuUsage()
const refArray = new Float64Array(256)
for (let i = 0; i < 1e7; i++) refArray[i & 255] += i
const ref1 = process.cpuUsage(ref0)
const referenceMs = (ref1.user + ref1.system) / 1000
console.log(
  JSON.stringify(
    {
      series: stats.series.size,
      streams: active.size,
      messages: times.length,
      build_ms: { p50: q(0.5), p90: q(0.9), max: times[times.length - 1].toFixed(2) },
      build_cpu_ms: { p50: pick(cpu, 0.5), p90: pick(cpu, 0.9), max: cpu[cpu.length - 1].toFixed(2) },
      build_gc_ms: { builds_with_gc: buildsWithGc, p90: pick(gcInBuild, 0.9), max: gcInBuild[gcInBuild.length - 1].toFixed(2) },
      gc_ms_per_second: (gcTotalMs / SECONDS).toFixed(2),
      reference_loop_cpu_ms: referenceMs.toFixed(1),
      message_bytes: bytes,
      sketch_bytes: stats.byteLength,
      heap_used_mb: Math.round(process.memoryUsage().heapUsed / 1e5) / 10,
      rss_mb: Math.round(process.memoryUsage().rss / 1e5) / 10,
      record_cpu_us_per_request: ((recordMs * 1000) / (SECONDS * ENDED_PER_SECOND)).toFixed(1),
      gaps_per_request: 'uniform 20 … 320',
      fill_ms: Math.round(fillMs),
    },
    null,
    2,
  ),
)
