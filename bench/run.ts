import type { ChildProcess } from 'node:child_process'
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { performance } from 'node:perf_hooks'
import { abortPhase, startCountingUpstream } from './abort-phase.ts'
import type { AbortFigures } from './abort-phase.ts'
import { gapChart } from './chart.ts'
import { growthChart } from './growth-chart.ts'
import { lengthGrowth, longStream, openStreamsGrowth } from './growth.ts'
import type { GrowthDeps, LengthStep, LongStreamFigures, OpenStreamsStep } from './growth.ts'
import { VALGRIND_HINT, describeInstructions, haveValgrind, instructionsPhase } from './instructions.ts'
import type { InstructionFigures } from './instructions.ts'
import type { Job, StreamResult } from './load-client.ts'
import { startLongUpstream } from './long-upstream.ts'
import type { LongUpstream } from './long-upstream.ts'
import { NGINX_HINT, findNginx, startNginx } from './nginx.ts'
import { OTEL_RATIO_TARGET, TRACES_RATIO_TARGET, describeOtel, otelPhase } from './otel-phase.ts'
import type { OtelPhaseResult } from './otel-phase.ts'
import { bucketCount, bucketDiff, bucketQuantile, scrapeOverhead } from './overhead.ts'
import { PORTKEY_HINT, ensurePortkey, portkeyHeaders, startPortkey } from './portkey.ts'
import { pidOf, rssBytes, startLoadClient, startPortPrinter, startTokentap as startTokentapProcess, stopOnExit } from './proc.ts'
import type { LoadClient, TokentapProcess } from './proc.ts'
import { LOAD_CHUNKS, LOAD_GAP_MS, SHORT_CHUNKS, SHORT_CONCURRENCY, evenPlan, loadJob, request, requestBody, turns, warmUpJob } from './plans.ts'
import type { Target } from './plans.ts'
import { SAT_CHUNKS, SAT_CONCURRENCY, saturationPhase } from './saturation-phase.ts'
import { PROMETHEUS_ACCEPT, describeScrape, scrapeAtSeries, servesProtobuf } from './scrape-phase.ts'
import type { ScrapeDeps, ScrapeFigures } from './scrape-phase.ts'
import { round, sorted, summary } from './stats.ts'
import type { Summary } from './stats.ts'
import { floorRows, issueTargets, memoryTargets, scrapeTargets, shortTargets } from './targets.ts'
import type { LoadRound, TargetInputs } from './targets.ts'
import { describeTarget, targetList } from './verdict.ts'
import type { TargetRow } from './verdict.ts'

/**
 * `npm run bench`: direct to the simulator, through a Node TCP relay (bench/tcp-relay.ts), through
 * a bare Node HTTP relay and the same behind a Fastify route (bench/node-relay.ts), through nginx
 * (when installed), through tokentap and through the Portkey gateway (installed on demand,
 * bench/portkey.ts), interleaved round by round, each in its own process (simulator, proxies, load
 * generator); then the instruction counts (bench/instructions.ts) and how the cost grows
 * (bench/growth.ts and the scrape phase at growing scales).
 * Prints a table and the targets of issue 29 (bench/targets.ts: each judged by bench/verdict.ts's
 * rule, so a verdict is printed only when the spread of the rounds allows one), writes
 * bench/results/latest.json, bench/results/gaps.svg and bench/results/growth.svg.
 * `--quick` runs fewer rounds, streams and scales (a smoke test of the harness, not figures to quote).
 * `--only PHASE` runs one part on a machine too busy for the whole run, with its targets, and
 * writes bench/results/PHASE.json (quick.PHASE.json with --quick):
 * - `cpu-short`: CPU per short request (tokentap, the Node and Fastify relays) and the OTel round;
 *   `--cpu-prof DIR` has tokentap write a CPU profile of it there, `--trace-gc` prints tokentap's GC
 *   lines of the counted rounds;
 * - `otel`: the OTel round (bench/otel-phase.ts); `--otel-interval-ms N` sets its export period
 *   (default 1000), `--otel-cpu-prof DIR` has both processes of each round write a CPU profile
 *   (DIR/off-R, DIR/on-R), `--otel-control` runs it with the export off in both processes;
 * - `traces`: the same round with spans on (`otel.traces` at its default sampling) instead of the metrics;
 * - `scrape`: the /metrics phase at its scales (bench/scrape-phase.ts);
 * - `growth`: how the cost grows (also writes bench/results/growth.svg);
 * - `cluster-scrape`: the cluster primary's /metrics against one process's (bench/cluster-scrape.ts);
 * - `instructions` (also `--instructions`): the instruction counts; `--callgrind-dir DIR` keeps
 *   callgrind's dumps there (`callgrind_annotate DIR/tokentap.PID.1` shows where they go).
 */

const HERE = dirname(fileURLToPath(import.meta.url)) // dist/bench
const ROOT = resolve(HERE, '..', '..')
const DIST = resolve(HERE, '..')
const QUICK = process.argv.includes('--quick')
const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i < 0 ? undefined : process.argv[i + 1]
}
const ONLY = process.argv.includes('--instructions') ? 'instructions' : argOf('--only')
const ONLY_PHASES = ['cpu-short', 'otel', 'traces', 'scrape', 'growth', 'instructions', 'cluster-scrape'] as const
type OnlyPhase = (typeof ONLY_PHASES)[number]
if (ONLY !== undefined && !(ONLY_PHASES as readonly string[]).includes(ONLY)) throw new Error(`--only takes ${ONLY_PHASES.join(', ')}, not ${ONLY}`)
const OTEL_PROF = argOf('--otel-cpu-prof')
/** `--otel-control`: the OTel round with the export off in both processes (how far apart two equal processes measure). */
const OTEL_CONTROL = process.argv.includes('--otel-control')
/** `--only cpu-short --cpu-prof DIR`: tokentap writes a CPU profile of the phase there. */
const CPU_PROF = argOf('--cpu-prof')
/** `--callgrind-dir DIR`: the instruction counts' callgrind dumps are written and kept there (for callgrind_annotate). */
const CALLGRIND_DIR = argOf('--callgrind-dir')
/** `--only cpu-short --trace-gc`: tokentap runs with --trace-gc; its lines of the counted rounds are printed. */
const TRACE_GC = process.argv.includes('--trace-gc')
const LOAD_AT_START = loadavg()[0]
const OUT_DIR = join(ROOT, 'bench', 'results')
/** Where the Portkey gateway is installed on demand (gitignored). */
const PORTKEY_DIR = join(ROOT, 'bench', '.cache', 'portkey')
const PROBE = join(DIST, 'bench', 'el-probe.js')

/**
 * `tcp-relay`: bench/tcp-relay.ts, bytes copied between two sockets (the floor for a Node process in the path);
 * `node-relay`: bench/node-relay.ts, tokentap's stack with nothing measured (the floor for a Node HTTP proxy);
 * `fastify-relay`: the same relay behind a Fastify route as tokentap's (the floor for a Fastify plugin: the targets' reference);
 * `portkey`: the Portkey gateway, a real peer; `@50`: the same path with the simulator's TTFT at
 * 50 ms, which hides Portkey's 25 ms wait before it forwards the first event (`direct@50` is its
 * reference for added TTFT).
 */
type Path = 'direct' | 'tcp-relay' | 'node-relay' | 'fastify-relay' | 'nginx' | 'tokentap' | 'http-proxy' | 'portkey' | 'direct@50' | 'portkey@50'
const PATH_ORDER: readonly Path[] = ['direct', 'tcp-relay', 'node-relay', 'fastify-relay', 'nginx', 'tokentap', 'http-proxy', 'portkey', 'direct@50', 'portkey@50']
/** The paths with the simulator's TTFT raised by this much. */
const SLOW_TTFT_MS = 50
const isSlow = (p: Path): boolean => p.endsWith('@50')

const P = {
  unloadedRounds: QUICK ? 60 : 450,
  /** Rounds of the @50 paths' unloaded phase (each request takes 50 ms more). */
  unloadedSlowRounds: QUICK ? 20 : 80,
  /** Unloaded rounds per block: a block's p50 is one "round" of the added-TTFT target (9 blocks). */
  unloadedBlock: QUICK ? 20 : 50,
  unloadedSlowBlock: QUICK ? 10 : 40,
  loadLevels: [50, 200],
  /** Rounds in which every path takes a turn (the table, the chart, the Portkey rows, the floors). */
  loadRounds: QUICK ? 1 : 3,
  /**
   * tokentap's rounds of the paired load phase, where only it and the Fastify relay take turns
   * (relay, tokentap, relay, …, relay: the relay has one more): the ratio targets' rounds. Three
   * rounds in one run read 0.51–3.33 ×; a median of 11 with its quartiles can be judged.
   */
  pairRounds: QUICK ? 3 : 11,
  loadChunks: LOAD_CHUNKS,
  loadGapMs: LOAD_GAP_MS,
  satStreams: QUICK ? 8 : 24,
  satConcurrency: SAT_CONCURRENCY,
  satChunks: SAT_CHUNKS,
  satRounds: QUICK ? 1 : 5,
  shortRequests: QUICK ? 200 : 1200,
  shortChunks: SHORT_CHUNKS,
  shortConcurrency: SHORT_CONCURRENCY,
  /**
   * The host moves one round by up to ±50 %, so the median needs many (5 rounds: 1.02-2.16 × in
   * one run; 20-40 rounds with the processes alone: 1.24-1.40 ×). `--short-rounds N` sets it.
   */
  shortRounds: Number(argOf('--short-rounds') ?? (QUICK ? 3 : 15)),
  /**
   * Portkey's streams per short round and its warm-up: at about 1.5-1.9 ms of CPU a request (ten
   * times tokentap's) its 1,200 took 4-5 s a round, more than all the other paths together.
   */
  shortRequestsPortkey: QUICK ? 100 : 300,
  shortWarmUpPortkey: QUICK ? 100 : 2000,
  /**
   * Short requests through each path before its rounds, not counted (JIT warm-up for the shape):
   * after 2,000, tokentap's first round of 1,200 still read 1.8-1.9 × its later ones; after
   * 5,000 it reads as the later ones (V8 compiles on its own threads, whose time counts).
   */
  shortWarmUp: QUICK ? 100 : 5000,
  /**
   * The OTel round: short requests through two fresh tokentap processes at once per round, export
   * off and on (OTLP/HTTP protobuf to a sink in this process every otelIntervalMs).
   */
  otelRequests: QUICK ? 500 : 3000,
  /** Even: as many rounds with either process started and loaded first. */
  otelRounds: QUICK ? 2 : 6,
  otelWarmRequests: QUICK ? 500 : 5000,
  otelIntervalMs: Number(argOf('--otel-interval-ms') ?? 1000),
  /** Fewer with --quick: a smoke run on a busy machine must not spend minutes opening streams. */
  openStreams: QUICK ? 200 : 1000,
  stallChunks: 50_000,
  stallReaders: QUICK ? 10 : 40,
  memoryRepeats: QUICK ? 1 : 3,
  /** Repeats for the paths other than tokentap (whose figures the targets judge). */
  memoryRepeatsOthers: QUICK ? 1 : 2,
  abortRounds: QUICK ? 1 : 3,
  abortChunks: 200,
  abortGapMs: 5,
  abortAfter: 5,
  /** The instruction counts: the short requests counted under callgrind, after these uncounted (as the CPU rounds' warm-up). */
  instructionRequests: QUICK ? 200 : 2000,
  instructionWarmUp: QUICK ? 300 : 5000,
  /** How the cost grows: open streams, each step's total chunk rate and CPU window. */
  growthStreams: QUICK ? [100, 300] : [100, 1000, 8000],
  growthRate: 2000,
  growthWindowMs: QUICK ? 2000 : 5000,
  /** The one long stream. */
  longChunks: QUICK ? 100_000 : 1_000_000,
  /** Stream lengths, 1 ms between chunks, 10 at a time, about lengthChunks chunks each. */
  lengths: QUICK ? [10, 100, 1000] : [10, 100, 1000, 10_000],
  lengthGapMs: 1,
  lengthConcurrency: 10,
  lengthChunks: QUICK ? 5000 : 30_000,
  /** The scrape phase's scales, in llm_ histogram series, and its scrapes at each (per format, with and without traffic). */
  seriesScales: QUICK ? [100, 1000] : [100, 1000, 10_000],
  scrapesAt: QUICK ? [20, 50] : [50, 200, 40],
  /** Room for the models the largest scale loads (17 llm_ histogram series a model today). */
  maxModels: 2000,
} as const

/** How the scrape phase measures (the results' `method.scrape`). */
const SCRAPE_METHOD =
  'bench/scrape-phase.ts at seriesScales llm_ histogram series (how many a model adds is counted once, so the scale is in series whatever the metrics per model), scrapesAt scrapes at each: /metrics fetched back to back with the headers Prometheus sends (OpenMetrics text first), each timed from request to the whole body, decompressed; and, when tokentap answers the protobuf Accept with protobuf (asked once, the answer’s content-type checked), the same scrapes with the Accept Prometheus sends for native histograms. First without traffic (proxy CPU per scrape: on-CPU time of all its threads over those scrapes, divided by them), then while 10 concurrent streams for random models keep series changing (what the targets judge). Event-loop delay inside the proxy: idle, scrapes alone, the same traffic alone, and traffic with scrapes. Memory at each scale: heapUsed + external and RSS after a full GC. Inside the proxy: the registry’s own figures per scrape (tokentap:scrape on node:diagnostics_channel).'

// ---------------------------------------------------------------- processes

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
process.on('SIGINT', () => process.exit(130))

type Ask = (cmd: string, reply: string) => Promise<Record<string, number>>

async function startListener(script: string[], args: string[], probe = false): Promise<{ proc: ChildProcess; port: number; ask: Ask }> {
  const started = await startPortPrinter(join(DIST, ...script), args, probe ? PROBE : undefined)
  stopOnExit(started.proc)
  return started
}

interface LogLine {
  request_id: string
  ttft_ms?: number
  itl_p50_ms?: number
  chunks?: number
}

interface Tokentap extends TokentapProcess {
  lines: Map<string, LogLine>
}

/** tokentap with the bench's routes: /t to the simulator, /a to the abort phase's upstream, /l to the long stream's. */
async function startTokentap(dir: string, simPort: number, extra: { abortPort?: number; longPort?: number }): Promise<Tokentap> {
  const lines = new Map<string, LogLine>()
  const routes = [
    ...(extra.abortPort === undefined ? [] : [{ prefix: '/a', upstream: `http://127.0.0.1:${extra.abortPort}` }]),
    ...(extra.longPort === undefined ? [] : [{ prefix: '/l', upstream: `http://127.0.0.1:${extra.longPort}` }]),
  ]
  const tt = await startTokentapProcess(DIST, dir, simPort, {
    maxModels: P.maxModels,
    extraRoutes: routes,
    onLine(text) {
      if (!text.includes('"msg":"request"')) return
      const l = JSON.parse(text) as LogLine
      lines.set(l.request_id, { request_id: l.request_id, ttft_ms: l.ttft_ms, itl_p50_ms: l.itl_p50_ms, chunks: l.chunks })
    },
  })
  stopOnExit(tt.proc)
  return { ...tt, lines }
}

let load: LoadClient
function startLoad(): void {
  load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
  stopOnExit(load.proc)
}
function job<T>(j: Job): Promise<T> {
  return load.job<T>(j)
}

const median = (xs: readonly number[]): number => {
  const a = sorted(xs)
  return a.length === 0 ? NaN : a[Math.floor((a.length - 1) / 2)]
}

/** Event-loop delay and GC inside a Node proxy over one load round (bench/el-probe.ts). */
type LoopRound = Record<string, number>

const otelTargetName = (): string => `OTel export on (OTLP/HTTP protobuf every ${P.otelIntervalMs} ms): CPU per short request ≤ ${OTEL_RATIO_TARGET} × off`
const otelMethod =
  'each of otelRounds rounds starts two tokentap processes with the same config but otel (the "on" one exports OTLP/HTTP protobuf to a sink in the bench process every otelIntervalMs, so collection, serialisation and the POST are in the figure), warms both, then loads both at once with otelRequests streams of shortChunks content chunks, shortConcurrency at a time each, and stops them (a fresh pair per round: one pair kept for the whole phase differed by a steady 3-10% with the export off in both); CPU = on-CPU time of all threads of each process (/proc schedstat, bench/proc.ts) over the round, divided by the requests; ratio = on/off per round, median of the rounds'

/** The OTel round (bench/otel-phase.ts) with this run's parameters. */
function runOtelPhase(simPort: number, log: (s: string) => void): Promise<OtelPhaseResult> {
  log(
    `OTel round: ${P.otelRounds} × ${P.otelRequests} requests of ${P.shortChunks} content chunks, ${P.shortConcurrency} at a time, through tokentap with the export off and on (every ${P.otelIntervalMs} ms) at once`,
  )
  return otelPhase({
    job,
    dist: DIST,
    simPort,
    maxModels: 100,
    chunks: P.shortChunks,
    requests: P.otelRequests,
    concurrency: P.shortConcurrency,
    rounds: P.otelRounds,
    warmRequests: P.otelWarmRequests,
    intervalMs: P.otelIntervalMs,
    control: OTEL_CONTROL,
    cpuProfDir: OTEL_PROF === undefined ? undefined : resolve(OTEL_PROF),
    log,
  })
}

const tracesTargetName = `spans on (otel.traces at the default sampling, OTLP/HTTP protobuf): CPU per short request ≤ ${TRACES_RATIO_TARGET} × off`
const tracesMethod =
  'the OTel round with the "on" process exporting spans (otel.traces at its default sampling: errors, stalls, SLO misses and slow requests kept, 10 % of the rest, batched every 5 s to a sink in the bench process) instead of the metrics; both processes warmed after the first export (it makes V8 rebuild the byte path’s optimised code), and each round ends once a batch has gone out after its requests (its own spans exported within it)'

/** The OTel round with spans on instead of the metrics (issue 38). */
function runTracesPhase(simPort: number, log: (s: string) => void): Promise<OtelPhaseResult> {
  log(`traces round: ${P.otelRounds} × ${P.otelRequests} requests of ${P.shortChunks} content chunks, ${P.shortConcurrency} at a time, through tokentap with spans off and on at once`)
  return otelPhase({
    job,
    dist: DIST,
    simPort,
    maxModels: 100,
    chunks: P.shortChunks,
    requests: P.otelRequests,
    concurrency: P.shortConcurrency,
    rounds: P.otelRounds,
    warmRequests: P.otelWarmRequests,
    intervalMs: P.otelIntervalMs,
    control: OTEL_CONTROL,
    signal: 'traces',
    cpuProfDir: OTEL_PROF === undefined ? undefined : resolve(OTEL_PROF),
    log,
  })
}

/** The instruction counts with this run's parameters, or why they were not taken. */
async function runInstructions(simPort: number, dir: string, log: (s: string) => void): Promise<InstructionFigures | string> {
  if (!(await haveValgrind())) {
    log(VALGRIND_HINT)
    return 'valgrind not installed'
  }
  const f = await instructionsPhase({
    job,
    dist: DIST,
    dir: CALLGRIND_DIR === undefined ? join(dir, 'callgrind') : resolve(CALLGRIND_DIR),
    simPort,
    requests: P.instructionRequests,
    warmUp: P.instructionWarmUp,
    chunks: P.shortChunks,
    concurrency: P.shortConcurrency,
    log,
  })
  log(`  ${describeInstructions(f)}`)
  return f
}

/** The scrape phase at each of seriesScales llm_ histogram series, in both formats when tokentap serves protobuf. */
async function seriesScales(deps: ScrapeDeps, log: (s: string) => void): Promise<ScrapeFigures[]> {
  const protobuf = await servesProtobuf(deps)
  log(`scrape: ${P.seriesScales.map((s) => s.toLocaleString('en')).join(' → ')} llm_ histogram series, text${protobuf ? ' and protobuf' : ' (protobuf not served)'}`)
  const out: ScrapeFigures[] = []
  for (let i = 0; i < P.seriesScales.length; i++) {
    const f = await scrapeAtSeries(deps, P.seriesScales[i], P.scrapesAt[i], protobuf)
    log(`  ${describeScrape(f)}`)
    out.push(f)
  }
  return out
}

interface Growth {
  readonly open_streams: OpenStreamsStep[]
  readonly long_stream: LongStreamFigures
  readonly lengths: LengthStep[]
}

/** How the cost grows: open streams, one long stream, stream length (bench/growth.ts). */
async function growthSection(d: GrowthDeps, log: (s: string) => void): Promise<Growth> {
  log(`growth: ${P.growthStreams.map((n) => n.toLocaleString('en')).join(' → ')} open streams (${P.growthRate} chunks/s in all)`)
  const open = await openStreamsGrowth(d, P.growthStreams, P.growthRate, P.growthWindowMs)
  log(`growth: one stream of ${P.longChunks.toLocaleString('en')} chunks`)
  const long = await longStream(d, P.longChunks)
  log(`growth: streams of ${P.lengths.map((n) => n.toLocaleString('en')).join(' → ')} chunks, ${P.lengthGapMs} ms apart, ${P.lengthConcurrency} at a time`)
  const lengths = await lengthGrowth(d, P.lengths, P.lengthGapMs, P.lengthConcurrency, P.lengthChunks)
  return { open_streams: open, long_stream: long, lengths }
}

/** bench/results/growth.svg (quick.growth.svg with --quick): one panel per measure and axis. */
function writeGrowthChart(g: Growth, scales: readonly ScrapeFigures[], caption: string): string {
  const ran = g.open_streams.filter((s) => s.skipped === undefined)
  const svg = growthChart(
    [
      {
        title: 'open streams: memory per stream',
        yLabel: 'KiB',
        x: ran.map((s) => s.streams),
        series: [
          { name: 'heap + external', values: ran.map((s) => s.held_kib_per_stream) },
          { name: 'RSS', values: ran.map((s) => s.rss_kib_per_stream) },
        ],
      },
      { title: `open streams: CPU per chunk (${P.growthRate} chunks/s)`, yLabel: 'µs', x: ran.map((s) => s.streams), series: [{ name: 'tokentap', values: ran.map((s) => s.cpu_us_per_chunk) }] },
      {
        title: 'stream length: CPU per chunk',
        yLabel: 'µs',
        x: g.lengths.map((l) => l.chunks_per_stream),
        series: [
          { name: 'all of it', values: g.lengths.map((l) => l.cpu_us_per_chunk) },
          { name: 'beyond the shorter length', values: g.lengths.map((l) => l.marginal_us_per_chunk) },
        ],
      },
      {
        title: 'llm_ histogram series: /metrics p99 with traffic',
        yLabel: 'ms',
        x: scales.map((s) => s.llm_histogram_series),
        series: [
          { name: 'text', values: scales.map((s) => s.ms.p99) },
          { name: 'protobuf', values: scales.map((s) => s.protobuf?.ms.p99 ?? null) },
        ],
      },
      {
        title: 'llm_ histogram series: memory',
        yLabel: 'MiB',
        x: scales.map((s) => s.llm_histogram_series),
        series: [
          { name: 'heap + external', values: scales.map((s) => s.memory_mib.held) },
          { name: 'RSS', values: scales.map((s) => s.memory_mib.rss) },
        ],
      },
      {
        title: `one stream of ${g.long_stream.chunks.toLocaleString('en')} chunks: held`,
        yLabel: 'MiB over before',
        x: ['before', 'open', 'ended'],
        series: [{ name: 'heap + external', values: [0, g.long_stream.held_open_mib, g.long_stream.held_after_kib / 1024] }],
      },
    ],
    caption,
  )
  const file = join(OUT_DIR, QUICK ? 'quick.growth.svg' : 'growth.svg')
  writeFileSync(file, svg)
  return file
}

/** Lines for the report: the growth section's figures. */
function describeGrowth(g: Growth, scales: readonly ScrapeFigures[]): string {
  let out = '\nhow the cost grows (tokentap):\n'
  for (const s of g.open_streams) {
    out +=
      s.skipped !== undefined
        ? `  ${s.streams.toLocaleString('en')} open streams: skipped (${s.skipped})\n`
        : `  ${s.streams.toLocaleString('en')} open streams: heap+external ${s.held_kib_per_stream} KiB/stream, RSS ${s.rss_kib_per_stream} KiB/stream, CPU ${s.cpu_us_per_chunk} µs/chunk (${s.chunks_per_s} chunks/s)\n`
  }
  const l = g.long_stream
  out += `  one stream of ${l.chunks.toLocaleString('en')} chunks: held ${l.held_open_mib} MiB while open (${l.held_open_bytes_per_chunk} B/chunk), ${l.held_after_kib} KiB after it ended; RSS ${l.rss_before_mib} → ${l.rss_open_mib} → ${l.rss_after_mib} MiB; ${l.cpu_us_per_chunk} µs/chunk\n`
  for (const s of g.lengths)
    out += `  streams of ${s.chunks_per_stream.toLocaleString('en')} chunks: ${s.cpu_us_per_chunk} µs/chunk, ${s.cpu_us_per_stream} µs/stream${s.marginal_us_per_chunk === null ? '' : `, ${s.marginal_us_per_chunk} µs per chunk beyond the shorter length`}\n`
  for (const s of scales)
    out += `  ${s.llm_histogram_series.toLocaleString('en')} llm_ histogram series: /metrics p99 ${s.ms.p99} ms text${s.protobuf === null ? '' : `, ${s.protobuf.ms.p99} ms protobuf`}; heap+external ${s.memory_mib.held} MiB, RSS ${s.memory_mib.rss} MiB\n`
  return out
}

function printTargets(title: string, targets: readonly TargetRow[], floors: readonly TargetRow[]): void {
  process.stdout.write(`\n${title}\n${targets.map((t) => `${describeTarget(t)}\n`).join('')}`)
  if (floors.length > 0) process.stdout.write(`\nfor information (a ratio is the first path over the second):\n${floors.map((t) => `  ${t.target}: ${t.value}\n`).join('')}`)
}

const VERDICT_RULE =
  'each ratio (or difference) row has one value per round: load rows, the paired rounds (relay, tokentap, relay, …, relay), each tokentap round over the mean of the relay rounds before and after it; CPU per short request and saturation, the rounds of those phases; added TTFT, blocks of unloadedBlock unloaded rounds; memory, the repeats. The row’s figure is the median; for a bound “≤ t” the row is met when the upper quartile is ≤ t, not met when the lower quartile is > t, and inconclusive otherwise (“≥ t” mirrored); quartiles by linear interpolation (R type 7). Rows with one figure (instruction counts, a scrape p99 over all its scrapes, one repeat) are judged on it. Portkey rows whose floor (the Fastify relay; the Node relay for memory) is itself less than 3 × better than Portkey are “ruled out”, with the figure.'

/** The inputs of the targets with nothing in them: `--only` runs fill in what their phase measured. */
function emptyInputs(): TargetInputs {
  return {
    loadLevels: [],
    pair: {},
    turns: {},
    short: {},
    instructions: 'not run',
    addedBlocks: {},
    addedP50: {},
    satCpu: {},
    satRate: {},
    held: {},
    rss: {},
    openStreams: P.openStreams,
    growthStreams: undefined,
    scales: [],
    slowTtftMs: SLOW_TTFT_MS,
  }
}

/** `--only PHASE`: one part of the bench with its targets (see the top of this file). */
async function only(which: OnlyPhase): Promise<void> {
  const t0 = performance.now()
  const log = (s: string): void => void process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0)}s] ${s}\n`)
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-bench-'))
  const sim = await startListener(['src', 'sim', 'cli.js'], [])
  startLoad()
  const list = targetList()
  const floors = targetList()
  const out: Record<string, unknown> = {}
  const inputs = emptyInputs() as { -readonly [K in keyof TargetInputs]: TargetInputs[K] }
  const method: Record<string, string> = {}
  let otel: OtelPhaseResult | undefined
  if (which === 'cpu-short') {
    const gcLines: string[] = []
    let counting = false
    const tt = await startTokentapProcess(DIST, dir, sim.port, {
      maxModels: 100,
      flags: [...(CPU_PROF === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', resolve(CPU_PROF)]), ...(TRACE_GC ? ['--trace-gc'] : [])],
      onLine: (line) => {
        if (counting && TRACE_GC && /^\[\d+:0x[0-9a-f]+\]/.test(line)) gcLines.push(line)
      },
    })
    stopOnExit(tt.proc)
    const relay = await startListener(['bench', 'node-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`], true)
    const fastifyRelay = await startListener(['bench', 'node-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`, '--fastify'], true)
    const urls = {
      tokentap: `http://127.0.0.1:${tt.port}/t/v1/chat/completions`,
      'node-relay': `http://127.0.0.1:${relay.port}/v1/chat/completions`,
      'fastify-relay': `http://127.0.0.1:${fastifyRelay.port}/v1/chat/completions`,
    }
    for (const [p, u] of Object.entries(urls)) await job(warmUpJob(u, `warm-${p}`))
    log(`short requests: ${P.shortRounds} rounds of ${P.shortRequests} × ${P.shortChunks} content chunks, ${P.shortConcurrency} at a time`)
    const pids = { tokentap: [pidOf(tt.proc)], 'node-relay': [pidOf(relay.proc)], 'fastify-relay': [pidOf(fastifyRelay.proc)] }
    const common = { job, urls, pids, plan: evenPlan(P.shortChunks, 0), streams: P.shortRequests, concurrency: P.shortConcurrency, idPrefix: 'short' }
    // The warm-up on its own, so --trace-gc and --cpu-prof see the counted rounds' steady state mostly.
    await saturationPhase({ ...common, rounds: 0, warmUp: P.shortWarmUp })
    counting = true
    const short = await saturationPhase({ ...common, rounds: P.shortRounds })
    counting = false
    const perRequestMs = (f: { cpuUs: number; requests: number }): number => f.cpuUs / f.requests / 1000
    out.short_requests = Object.fromEntries(
      Object.keys(urls).map((p) => [p, { cpu_ms_per_request: round(perRequestMs(short[p]), 3), requests: short[p].requests, rounds: short[p].rounds.map((r) => round(perRequestMs(r), 3)) }]),
    )
    inputs.short = Object.fromEntries(Object.keys(urls).map((p) => [p, short[p].rounds.map(perRequestMs)]))
    shortTargets(inputs, list)
    floors.roundsRow(
      'the Fastify relay against the Node relay: CPU per short request',
      inputs.short['fastify-relay'].map((v, i) => v / inputs.short['node-relay'][i]),
      undefined,
    )
    floors.roundsRow(
      'tokentap against the Node relay: CPU per short request (the earlier measure)',
      inputs.short.tokentap.map((v, i) => v / inputs.short['node-relay'][i]),
      undefined,
    )
    if (TRACE_GC) {
      out.trace_gc = traceGcFigures(gcLines, short.tokentap.requests)
      log(`tokentap --trace-gc over the counted rounds: ${JSON.stringify(out.trace_gc)}`)
    }
    for (const p of [relay, fastifyRelay]) p.proc.kill('SIGKILL')
    if (CPU_PROF !== undefined) {
      // A profile is written on a normal exit only: SIGTERM drains, then the process exits.
      const exited = new Promise((r) => tt.proc.once('exit', r))
      tt.proc.kill('SIGTERM')
      await exited
      log(`tokentap's CPU profile written to ${resolve(CPU_PROF)}`)
    } else tt.proc.kill('SIGKILL')
    method.cpu =
      'on-CPU time of all threads of the proxy process (/proc/PID/task/*/schedstat, ns; bench/proc.ts) over shortRequests streams of shortChunks content chunks, shortConcurrency at a time, divided by the requests (after shortWarmUp uncounted requests of the same shape through each path)'
    otel = await runOtelPhase(sim.port, log)
  }
  if (which === 'otel') otel = await runOtelPhase(sim.port, log)
  let traces: OtelPhaseResult | undefined
  if (which === 'traces') traces = await runTracesPhase(sim.port, log)
  if (which === 'instructions') {
    inputs.instructions = await runInstructions(sim.port, dir, log)
    shortTargets(inputs, list)
    // Only the instruction row: the schedstat row has no rounds here.
    list.targets.splice(0, 1)
    out.instructions = inputs.instructions
  }
  if (which === 'scrape' || which === 'growth') {
    const long = await startLongUpstream()
    const tt = await startTokentap(dir, sim.port, { longPort: long.port })
    const streamUrl = `http://127.0.0.1:${tt.port}/t/v1/chat/completions`
    await job(warmUpJob(streamUrl, 'warm'))
    if (which === 'growth') {
      const g = await growthSection(growthDeps(tt, streamUrl, long, [pidOf(sim.proc), pidOf(load.proc)], log), log)
      out.growth = g
      inputs.growthStreams = g.open_streams
    }
    const scales = await seriesScales(scrapeDeps(tt, streamUrl), log)
    out.scrape = scales
    inputs.scales = scales
    if (which === 'growth') {
      const largest = inputs.growthStreams?.at(-1)?.streams
      memoryTargets(inputs, list, largest)
      out.growth_chart = writeGrowthChart(out.growth as Growth, scales, caption())
    }
    scrapeTargets(inputs, list)
    await long.close()
    tt.proc.kill('SIGKILL')
    method.scrape = SCRAPE_METHOD
  }
  if (which === 'cluster-scrape') {
    // The primary's /metrics against one process's at 100, 1,000 and 4,000 label sets (bench/cluster-scrape.ts).
    const sets = QUICK ? '100' : '100,1000,4000'
    out.cluster_scrape = JSON.parse(execFileSync(process.execPath, [join(HERE, 'cluster-scrape.js'), '--sets', sets, '--json'], { encoding: 'utf8', maxBuffer: 1 << 20 }))
    log(`cluster scrape: ${JSON.stringify(out.cluster_scrape)}`)
    method.cluster_scrape =
      'bench/cluster-scrape.ts: CPU per scrape, one registry against two workers’ registries merged by the primary’s ClusterMetrics (their reports through a structured clone), the same requests in both, 20 changed between scrapes; median of the scrapes'
  }
  if (otel !== undefined) {
    list.T(otelTargetName(), describeOtel(otel), otel.met)
    method.otel = otelMethod
  }
  if (traces !== undefined) {
    list.T(tracesTargetName, describeOtel(traces), traces.met)
    method.traces = tracesMethod
  }
  const result = {
    date: new Date().toISOString(),
    quick: QUICK,
    only: which,
    machine: machine(undefined, undefined),
    parameters: P,
    method: { ...method, verdict: VERDICT_RULE },
    ...out,
    otel_short_requests: otel,
    traces_short_requests: traces,
    targets: list.targets,
    floors: floors.targets,
    seconds: round((performance.now() - t0) / 1000, 0),
  }
  mkdirSync(OUT_DIR, { recursive: true })
  const jsonFile = join(OUT_DIR, QUICK ? `quick.${which}.json` : `${which}.json`)
  writeFileSync(jsonFile, `${JSON.stringify(result, null, 2)}\n`)
  if (out.growth !== undefined) process.stdout.write(describeGrowth(out.growth as Growth, out.scrape as ScrapeFigures[]))
  const m = result.machine
  printTargets(`targets (${m.cpu}, ${m.nproc} cores, node ${m.node}, load average ${m.loadavg_1m_at_start} → ${m.loadavg_1m_at_end}):`, list.targets, floors.targets)
  process.stdout.write(`\nwrote ${jsonFile}${out.growth_chart === undefined ? '' : `\nwrote ${String(out.growth_chart)}`}\n`)
  rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}

/**
 * What tokentap's `--trace-gc` lines say over the counted rounds: collections by kind, their
 * pauses, and the heap allocated between them per request (each collection's heap before it minus
 * the heap after the one before: what the requests allocated, whatever died young).
 */
function traceGcFigures(lines: readonly string[], requests: number): Record<string, unknown> {
  let prevAfter = NaN
  let allocatedMb = 0
  let pauseMs = 0
  const kinds: Record<string, number> = {}
  for (const l of lines) {
    const m = /: ([A-Za-z-]+(?: [A-Za-z-]+)?) ([\d.]+) \([\d.]+\) -> ([\d.]+) \([\d.]+\) MB, (?:pooled: [\d.]+ MB, )?([\d.]+) \/ [\d.]+ ms/.exec(l)
    if (m === null) continue
    kinds[m[1]] = (kinds[m[1]] ?? 0) + 1
    if (Number.isFinite(prevAfter)) allocatedMb += Math.max(0, Number(m[2]) - prevAfter)
    prevAfter = Number(m[3])
    pauseMs += Number(m[4])
  }
  return { collections: kinds, pause_ms: round(pauseMs, 1), requests, allocated_kib_per_request: round((allocatedMb * 1024) / requests, 1), first_lines: lines.slice(0, 5) }
}

/** The scrape phase's view of tokentap. */
function scrapeDeps(tt: TokentapProcess, streamUrl: string): ScrapeDeps {
  return { job, ask: tt.ask, pid: pidOf(tt.proc), streamUrl, metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics`, accept: PROMETHEUS_ACCEPT, gzip: true, body: requestBody }
}

/** The growth section's view of tokentap (its /t and /l routes) and of the processes holding the streams' other ends. */
function growthDeps(tt: TokentapProcess, url: string, long: LongUpstream, peers: number[], log: (s: string) => void): GrowthDeps {
  return { job, ask: tt.ask, pid: pidOf(tt.proc), url, longUrl: `http://127.0.0.1:${tt.port}/l/v1/chat/completions`, long, adminPort: tt.adminPort, peers, log }
}

const caption = (): string =>
  `${machine(undefined, undefined).cpu}, ${cpus().length} cores, node ${process.version}, load average ${round(LOAD_AT_START, 2)} → ${round(loadavg()[0], 2)}, ${new Date().toISOString().slice(0, 10)}`

// ---------------------------------------------------------------- phases

async function main(): Promise<void> {
  if (ONLY !== undefined) return only(ONLY as OnlyPhase)
  const t0 = performance.now()
  const log = (s: string): void => void process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(0)}s] ${s}\n`)
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-bench-'))
  const abortUpstream = await startCountingUpstream(P.abortChunks, P.abortGapMs)
  const abortOrigin = `http://127.0.0.1:${abortUpstream.port}`
  const longUpstream = await startLongUpstream()
  const sim = await startListener(['src', 'sim', 'cli.js'], [])
  const simBase = `http://127.0.0.1:${sim.port}/v1`
  const tt = await startTokentap(dir, sim.port, { abortPort: abortUpstream.port, longPort: longUpstream.port })
  const relay = await startListener(['bench', 'node-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`, '--alt-upstream', abortOrigin], true)
  const fastifyRelay = await startListener(['bench', 'node-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`, '--fastify'], true)
  const tcpRelay = await startListener(['bench', 'tcp-relay.js'], ['--upstream', `http://127.0.0.1:${sim.port}`], true)
  // tokentap measuring an @fastify/http-proxy registration (tokentapReplyOptions), beside its own route.
  const fhp = await startListener(['bench', 'http-proxy-app.js'], ['--upstream', `http://127.0.0.1:${sim.port}`, '--log', join(dir, 'http-proxy.log')], true)
  const nginxBin = findNginx()
  const pkScript = ensurePortkey(PORTKEY_DIR, log)
  const target: Partial<Record<Path, Target>> = {
    direct: { url: `${simBase}/chat/completions` },
    'tcp-relay': { url: `http://127.0.0.1:${tcpRelay.port}/v1/chat/completions` },
    'node-relay': { url: `http://127.0.0.1:${relay.port}/v1/chat/completions` },
    'fastify-relay': { url: `http://127.0.0.1:${fastifyRelay.port}/v1/chat/completions` },
    tokentap: { url: `http://127.0.0.1:${tt.port}/t/v1/chat/completions` },
    'http-proxy': { url: `http://127.0.0.1:${fhp.port}/v1/chat/completions` },
    'direct@50': { url: `${simBase}/chat/completions`, ttftMs: SLOW_TTFT_MS },
  }
  const proxyPids: Partial<Record<Path, number[]>> = {
    tokentap: [pidOf(tt.proc)],
    'node-relay': [pidOf(relay.proc)],
    'fastify-relay': [pidOf(fastifyRelay.proc)],
    'tcp-relay': [pidOf(tcpRelay.proc)],
    'http-proxy': [pidOf(fhp.proc)],
  }
  const asks: Partial<Record<Path, Ask>> = { tokentap: tt.ask, 'node-relay': relay.ask, 'fastify-relay': fastifyRelay.ask, 'tcp-relay': tcpRelay.ask, 'http-proxy': fhp.ask }
  // Each path's way to the counting upstream of the abort phase (the TCP relay cannot route by path).
  const abortUrl: Partial<Record<Path, { url: string; headers?: Record<string, string> }>> = {
    tokentap: { url: `http://127.0.0.1:${tt.port}/a/v1/chat/completions` },
    'node-relay': { url: `http://127.0.0.1:${relay.port}/a/v1/chat/completions` },
  }
  if (nginxBin === undefined) {
    process.stdout.write(`${NGINX_HINT}\n(skipping the nginx columns)\n`)
  } else {
    const ng = await startNginx(nginxBin, join(dir, 'nginx'), sim.port, abortUpstream.port)
    stopOnExit(ng.proc, 'SIGTERM')
    target.nginx = { url: `http://127.0.0.1:${ng.port}/v1/chat/completions` }
    proxyPids.nginx = ng.pids
    abortUrl.nginx = { url: `http://127.0.0.1:${ng.port}/a/v1/chat/completions` }
  }
  let portkeyStderr: (() => number) | undefined
  if (pkScript === undefined) {
    process.stdout.write(`${PORTKEY_HINT}\n`)
  } else {
    const pk = await startPortkey(pkScript, DIST)
    stopOnExit(pk.proc)
    portkeyStderr = pk.stderrLines
    const url = `http://127.0.0.1:${pk.port}/v1/chat/completions`
    target.portkey = { url, headers: (plan) => portkeyHeaders(simBase, plan) }
    target['portkey@50'] = { url, headers: (plan) => portkeyHeaders(simBase, plan), ttftMs: SLOW_TTFT_MS }
    proxyPids.portkey = [pidOf(pk.proc)]
    proxyPids['portkey@50'] = [pidOf(pk.proc)]
    asks.portkey = pk.ask
    asks['portkey@50'] = pk.ask
    abortUrl.portkey = { url, headers: portkeyHeaders(`${abortOrigin}/v1`, evenPlan(1, 0)) }
  }
  startLoad()
  const all = (Object.keys(target) as Path[]).sort((a, b) => PATH_ORDER.indexOf(a) - PATH_ORDER.indexOf(b))
  /** The paths at the simulator's usual TTFT 0, and the @50 ones (unloaded and load phases only). */
  const paths = all.filter((p) => !isSlow(p))
  const slowPaths = all.filter(isSlow)
  const proxies = paths.filter((p) => p !== 'direct')
  const tgt = (p: Path): Target => {
    const t = target[p]
    if (t === undefined) throw new Error(`no target for ${p}`)
    return t
  }

  // Warm up every path (JIT, connection pools); the @50 paths share their processes.
  log(`paths: ${all.join(', ')}`)
  for (const p of paths) await job(warmUpJob(tgt(p), `warm-${p}`))

  // --- memory first, on processes that have not yet grown their heaps for the heavier phases
  log(`memory: ${P.openStreams} open streams (every proxy), ${P.stallReaders} stalled readers (tokentap)`)
  const memory: Record<string, number> = {}
  const memoryRuns: Record<string, number[]> = {}
  for (const p of ['tokentap', 'node-relay', 'tcp-relay', 'nginx', 'portkey'] as const) {
    const pids = proxyPids[p]
    if (target[p] === undefined || pids === undefined || pids.length === 0) continue
    Object.assign(memory, await memoryPhase(p, tgt(p), pids, asks[p], tt, memoryRuns))
    const held = memory[`${p}_held_per_stream_kib`]
    const stall = memory[`${p}_stalled_reader_kib`]
    log(
      `  ${p}: ${memory[`${p}_rss_per_stream_kib`]} KiB RSS/stream${held === undefined ? '' : ` (heap+external ${held})`}` +
        (stall === undefined ? '' : `, stalled reader ${stall} KiB beyond a normal one (held ${memory[`${p}_stalled_reader_held_kib`]} KiB, ${memory[`${p}_stalled_reader_chunks`]} chunks)`),
    )
  }

  // --- unloaded TTFT, one request at a time, paths interleaved; the @50 paths in their own, shorter loop
  log('unloaded TTFT')
  const unloaded: Record<string, number[]> = Object.fromEntries(all.map((p) => [p, []]))
  // The first content chunk's one-way delay (simulator's send stamp → client), per path: what a
  // path adds to it is the client-side side of llm_proxy_overhead_seconds{phase="first_chunk"}.
  const firstDelay: Record<string, number[]> = Object.fromEntries(all.map((p) => [p, []]))
  const ttftPlan = evenPlan(3, 1)
  const ttResults: StreamResult[] = []
  const overheadUrl = `http://127.0.0.1:${tt.adminPort}/metrics`
  const overhead0 = await scrapeOverhead(overheadUrl, 'first_chunk')
  for (const { round: r, path: p } of turns(paths, P.unloadedRounds)) {
    const [res] = await job<StreamResult[]>({ kind: 'streams', ...request(tgt(p), ttftPlan), count: 1, concurrency: 1, phaseMs: 0, idPrefix: `ttft-${p}-${r}`, detail: true })
    unloaded[p].push(res.ok ? res.ttft : NaN)
    firstDelay[p].push(res.ok && res.delays.length > 0 ? res.delays[0] : NaN)
    if (p === 'tokentap') ttResults.push(res)
  }
  const overhead1 = await scrapeOverhead(overheadUrl, 'first_chunk')
  for (const { round: r, path: p } of turns(slowPaths, P.unloadedSlowRounds)) {
    const [res] = await job<StreamResult[]>({ kind: 'streams', ...request(tgt(p), ttftPlan), count: 1, concurrency: 1, phaseMs: 0, idPrefix: `ttft-${p}-${r}`, detail: true })
    unloaded[p].push(res.ok ? res.ttft : NaN)
  }
  const accuracyUnloaded = await collectAccuracy(tt, ttResults)

  // --- under load: client figures per round, and the event loop and GC inside every Node proxy
  type LoadAcc = { ttft: number[]; distortions: number[]; delays: number[]; results: StreamResult[]; rounds: LoadRound[]; loop: LoopRound[] }
  const newAcc = (): LoadAcc => ({ ttft: [], distortions: [], delays: [], results: [], rounds: [], loop: [] })
  /** One load round of `n` streams through `p`, added to `acc`. */
  const loadRound = async (n: number, p: Path, id: string, acc: LoadAcc): Promise<void> => {
    const ask = asks[p]
    if (ask !== undefined) await ask('el-start', 'el-started')
    const results = await job<StreamResult[]>(loadJob(tgt(p), n, id))
    const loop = ask === undefined ? undefined : await ask('el-stop', 'el')
    if (loop !== undefined) acc.loop.push(loop)
    const ttft: number[] = []
    const dist: number[] = []
    for (const res of results) {
      if (!res.ok) continue
      ttft.push(res.ttft)
      dist.push(...res.distortions)
      acc.delays.push(...res.delays)
      if (p === 'tokentap') acc.results.push(res)
    }
    acc.ttft.push(...ttft)
    acc.distortions.push(...dist)
    acc.rounds.push({ ttft_p99: summary(ttft).p99, gap_distortion_p99: summary(dist).p99, el_p99: loop?.p99 ?? NaN })
    await sleep(200)
  }
  const loadResults: Record<number, Record<string, LoadAcc>> = {}
  for (const n of P.loadLevels) {
    log(`load: ${n} streams × ${P.loadChunks} chunks ${P.loadGapMs} ms apart, every path, ${P.loadRounds} rounds`)
    const acc: Record<string, LoadAcc> = Object.fromEntries(all.map((p) => [p, newAcc()]))
    for (const { round: r, path: p } of turns(all, P.loadRounds)) await loadRound(n, p, `load${n}-${p}-${r}`, acc[p])
    loadResults[n] = acc
  }
  await sleep(500)
  const accuracyLoad = await collectAccuracy(tt, loadResults[P.loadLevels[0]].tokentap.results)
  // The paired rounds the load targets judge: the Fastify relay and tokentap alone, relay first and
  // last (relay, tokentap, relay, …, relay), each tokentap round set against the relay rounds on
  // either side of it.
  const pairResults: Record<number, { tokentap: LoadAcc; relay: LoadAcc }> = {}
  for (const n of P.loadLevels) {
    log(`load: ${n} streams, paired rounds: the Fastify relay and tokentap in turn, ${P.pairRounds} rounds of tokentap`)
    const pr = { tokentap: newAcc(), relay: newAcc() }
    for (let r = 0; r < P.pairRounds; r++) {
      await loadRound(n, 'fastify-relay', `pair${n}-relay-${r}`, pr.relay)
      await loadRound(n, 'tokentap', `pair${n}-tokentap-${r}`, pr.tokentap)
    }
    await loadRound(n, 'fastify-relay', `pair${n}-relay-${P.pairRounds}`, pr.relay)
    pairResults[n] = pr
  }

  // --- saturation: no gaps
  log(`saturation: ${P.satStreams} streams × ${P.satChunks} chunks, no gaps, ${P.satConcurrency} at a time, ${P.satRounds} rounds`)
  const sat = await saturationPhase({
    job,
    urls: Object.fromEntries(paths.map((p) => [p, tgt(p)])),
    pids: proxyPids,
    plan: evenPlan(P.satChunks, 0),
    streams: P.satStreams,
    concurrency: P.satConcurrency,
    rounds: P.satRounds,
  })

  // --- CPU per short request: 3 content chunks, 8 at a time
  log(`short requests: ${P.shortRounds} rounds of ${P.shortRequests} × ${P.shortChunks} content chunks (Portkey ${P.shortRequestsPortkey}), ${P.shortConcurrency} at a time`)
  const short = await saturationPhase({
    job,
    urls: Object.fromEntries(proxies.map((p) => [p, tgt(p)])),
    pids: proxyPids,
    plan: evenPlan(P.shortChunks, 0),
    streams: P.shortRequests,
    concurrency: P.shortConcurrency,
    rounds: P.shortRounds,
    idPrefix: 'short',
    warmUp: P.shortWarmUp,
    perPath: { portkey: { streams: P.shortRequestsPortkey, warmUp: P.shortWarmUpPortkey } },
  })

  // --- the same short requests counted in instructions (bench/instructions.ts)
  const instructions = await runInstructions(sim.port, dir, log)

  // --- the OTel round: the same short requests with the OTLP export off and on (issue 15)
  const otel = await runOtelPhase(sim.port, log)
  log(`  ${describeOtel(otel)}`)

  // --- client aborts: what the upstream still sends after the client is gone
  log(`client abort: a stream of ${P.abortChunks} chunks ${P.abortGapMs} ms apart, the client leaves after ${P.abortAfter}`)
  const abortJobs = Object.fromEntries(
    Object.entries(abortUrl).map(([p, { url, headers }]) => [p, { kind: 'abort' as const, url, headers, body: requestBody(evenPlan(1, 0), 'abort-model'), after: P.abortAfter }]),
  )
  const aborts = await abortPhase({ job, jobs: abortJobs, upstream: abortUpstream, rounds: P.abortRounds, streamMs: P.abortChunks * P.abortGapMs })
  for (const [p, a] of Object.entries(aborts)) log(`  ${p}: ${a.chunks_after_abort} chunks (${a.bytes_after_abort} B) sent after the abort, upstream open ${a.upstream_open_ms_after_abort} ms longer`)
  await abortUpstream.close()

  // --- how the cost grows: open streams, one long stream, stream length; then series (the scrape phase at growing scales)
  // The other Node proxies are done: stopped, so the largest step's CPU and memory are tokentap's and the machine's own.
  for (const p of [relay, fastifyRelay, tcpRelay, fhp]) p.proc.kill('SIGKILL')
  const growth = await growthSection(growthDeps(tt, tgt('tokentap').url, longUpstream, [pidOf(sim.proc), pidOf(load.proc)], log), log)
  await longUpstream.close()
  const scales = await seriesScales(scrapeDeps(tt, tgt('tokentap').url), log)
  // ---------------------------------------------------------------- report
  const u = Object.fromEntries(all.map((p) => [p, summary(unloaded[p])])) as Record<Path, Summary>
  const refOf = (p: Path): Path => (isSlow(p) ? 'direct@50' : 'direct')
  const added = (p: Path, q: 'p50' | 'p99'): number => u[p][q] - u[refOf(p)][q]
  // Unloaded rounds in blocks: each block's p50 is one round of the added-TTFT targets.
  const blockP50 = (p: Path): number[] => {
    const size = isSlow(p) ? P.unloadedSlowBlock : P.unloadedBlock
    const xs = unloaded[p]
    const out: number[] = []
    for (let i = 0; i + size <= xs.length; i += size) out.push(summary(xs.slice(i, i + size)).p50)
    return out
  }
  const addedBlocks = (p: Path): number[] => {
    const ref = blockP50(refOf(p))
    return blockP50(p).map((v, i) => v - ref[i])
  }
  const loopOut = (rounds: LoopRound[]): Record<string, number> | null => {
    if (rounds.length === 0) return null
    const out: Record<string, number> = {
      event_loop_delay_p99_ms: round(median(rounds.map((r) => r.p99))),
      event_loop_delay_max_ms: round(Math.max(...rounds.map((r) => r.max))),
      rounds: rounds.length,
    }
    // GC: summed over the rounds (longest pause: the longest of any round), by kind as well.
    for (const key of new Set(rounds.flatMap((r) => Object.keys(r)))) {
      if (!key.startsWith('gc_')) continue
      const vs = rounds.map((r) => r[key] ?? 0)
      out[key] = round(key.endsWith('max_ms') ? Math.max(...vs) : vs.reduce((a, b) => a + b, 0), key.endsWith('count') ? 0 : 2)
    }
    return out
  }
  const loadOut = Object.fromEntries(
    P.loadLevels.map((n) => [
      n,
      Object.fromEntries(
        all.map((p) => {
          const a = loadResults[n][p]
          return [
            p,
            {
              ttft: pick(summary(a.ttft)),
              gap_distortion: pick(summary(a.distortions)),
              one_way_delay: pick(summary(a.delays)),
              rounds: a.rounds.map((r) => ({ ttft_p99: round(r.ttft_p99), gap_distortion_p99: round(r.gap_distortion_p99) })),
              inside: loopOut(a.loop),
            },
          ]
        }),
      ),
    ]),
  ) as Record<
    number,
    Record<
      Path,
      {
        ttft: Record<string, number>
        gap_distortion: Record<string, number>
        one_way_delay: Record<string, number>
        rounds: { ttft_p99: number; gap_distortion_p99: number }[]
        inside: Record<string, number> | null
      }
    >
  >
  const perChunk = (f: { cpuUs: number; chunks: number }): number => f.cpuUs / f.chunks
  const rate = (f: { chunks: number; seconds: number }): number => f.chunks / f.seconds
  const perRequestMs = (f: { cpuUs: number; requests: number }): number => f.cpuUs / f.requests / 1000
  const satOut = Object.fromEntries(
    paths.map((p) => [
      p,
      {
        chunks_per_s: round(rate(sat[p]), 0),
        cpu_us_per_chunk: p === 'direct' ? null : round(perChunk(sat[p]), 3),
        chunks: sat[p].chunks,
        rounds: sat[p].rounds.map((r) => ({ chunks_per_s: round(rate(r), 0), cpu_us_per_chunk: p === 'direct' ? null : round(perChunk(r), 3) })),
      },
    ]),
  )
  const shortOut = Object.fromEntries(
    proxies.map((p) => [
      p,
      {
        cpu_ms_per_request: round(perRequestMs(short[p]), 3),
        requests: short[p].requests,
        requests_per_s: round(short[p].requests / short[p].seconds, 0),
        rounds: short[p].rounds.map((r) => round(perRequestMs(r), 3)),
      },
    ]),
  )

  // The overhead tokentap reports for the unloaded phase's requests, beside the client's figure.
  const overheadBuckets = bucketDiff(overhead1, overhead0)
  const overheadN = bucketCount(overheadBuckets)
  const overheadP50 = overheadN > 0 ? bucketQuantile(overheadBuckets, 0.5) * 1000 : NaN
  // The client's side of the same span: what the path adds to the first chunk's one-way delay
  // (p50 through tokentap minus p50 direct), less what one more hop adds on this machine (the
  // TCP relay's own addition: a second loopback connection, a wake-up, a read and a write),
  // which no proxy's account of its own work can see.
  const firstP50 = (p: Path): number => summary(firstDelay[p]).p50
  const firstAdded = round(firstP50('tokentap') - firstP50('direct'))
  const hop = target['tcp-relay'] !== undefined ? round(firstP50('tcp-relay') - firstP50('direct')) : 0
  const overhead = {
    metric: 'llm_proxy_overhead_seconds{phase="first_chunk"}',
    requests: overheadN,
    p50_ms: overheadN > 0 ? round(overheadP50) : null,
    client_added_first_chunk_p50_ms: firstAdded,
    hop_first_chunk_p50_ms: hop,
    client_added_beyond_hop_p50_ms: round(firstAdded - hop),
    difference_ms: overheadN > 0 ? round(overheadP50 - (firstAdded - hop)) : null,
    client_added_ttft_p50_ms: round(added('tokentap', 'p50')),
  }

  // ---------------------------------------------------------------- targets (issue 29): bench/targets.ts, judged by bench/verdict.ts
  const roundOut = (r: LoadRound): LoadRound => ({ ttft_p99: round(r.ttft_p99), gap_distortion_p99: round(r.gap_distortion_p99), el_p99: round(r.el_p99) })
  const inputs: TargetInputs = {
    loadLevels: P.loadLevels,
    pair: Object.fromEntries(P.loadLevels.map((n) => [n, { tokentap: pairResults[n].tokentap.rounds, relay: pairResults[n].relay.rounds }])),
    turns: Object.fromEntries(P.loadLevels.map((n) => [n, Object.fromEntries(all.map((p) => [p, loadResults[n][p].rounds]))])),
    short: Object.fromEntries(proxies.map((p) => [p, short[p].rounds.map(perRequestMs)])),
    instructions,
    addedBlocks: Object.fromEntries(all.filter((p) => !p.startsWith('direct')).map((p) => [p, addedBlocks(p)])),
    addedP50: Object.fromEntries(all.filter((p) => !p.startsWith('direct')).map((p) => [p, added(p, 'p50')])),
    satCpu: Object.fromEntries(proxies.map((p) => [p, sat[p].rounds.map(perChunk)])),
    satRate: Object.fromEntries(paths.map((p) => [p, sat[p].rounds.map(rate)])),
    held: Object.fromEntries(Object.entries(memoryRuns).flatMap(([k, v]) => (k.endsWith('_held_per_stream_kib') ? [[k.slice(0, -'_held_per_stream_kib'.length), v]] : []))),
    rss: Object.fromEntries(Object.entries(memoryRuns).flatMap(([k, v]) => (k.endsWith('_rss_per_stream_kib') ? [[k.slice(0, -'_rss_per_stream_kib'.length), v]] : []))),
    openStreams: P.openStreams,
    growthStreams: growth.open_streams,
    scales,
    slowTtftMs: SLOW_TTFT_MS,
  }
  const list = targetList()
  issueTargets(inputs, list)
  list.T(otelTargetName(), describeOtel(otel), otel.met)
  list.T(
    'llm_proxy_overhead_seconds{phase="first_chunk"} p50 within 0.1 ms of the client-side added latency of the first chunk (unloaded; beyond one TCP hop)',
    overheadN > 0
      ? `${overhead.p50_ms} ms vs ${overhead.client_added_beyond_hop_p50_ms} ms (first chunk's one-way delay p50 ${overhead.client_added_first_chunk_p50_ms} ms over direct, less the TCP relay's ${overhead.hop_first_chunk_p50_ms} ms; ${overheadN} requests)`
      : 'n/a (metric absent)',
    overheadN > 0 ? Math.abs(overhead.difference_ms ?? Infinity) <= 0.1 : null,
  )
  const floors = targetList()
  floorRows(inputs, floors)

  const result = {
    date: new Date().toISOString(),
    quick: QUICK,
    machine: machine(nginxBin, pkScript),
    parameters: P,
    method: {
      paths:
        'direct: client to simulator; tcp-relay: bench/tcp-relay.ts, node:net copying bytes between a client socket and its own upstream socket, no HTTP parsing (the least any Node process in the path costs); node-relay: bench/node-relay.ts, node:http + undici writing each upstream chunk on, nothing measured (a plain Node proxy on the same stack); fastify-relay: the same relay (bench/node-relay.ts --fastify) behind one Fastify catch-all route set up as tokentap routes are (a content-type parser that reads nothing, the reply hijacked; no hooks, no logger): what the Fastify router adds before anything is measured; nginx: one worker, proxy_buffering off, keep-alive upstream (a C pass-through proxy); tokentap: the proxy with parsing, token counting, metrics and a log line per request; http-proxy: bench/http-proxy-app.ts, an @fastify/http-proxy registration measured by tokentapReplyOptions (same measuring and log line, reply-from in the byte path); ' +
        `portkey: @portkey-ai/gateway (bench/portkey.ts, installed into bench/.cache/portkey), provider openai with x-portkey-custom-host = the simulator, the plan in the x-tokentap-sim header; @${SLOW_TTFT_MS}: the same path with the simulator's TTFT ${SLOW_TTFT_MS} ms higher (it hides Portkey's 25 ms wait before the first event); direct@${SLOW_TTFT_MS} is the reference for their added TTFT`,
      added_ttft: `percentile of the path minus the same percentile of direct (direct@${SLOW_TTFT_MS} for the @${SLOW_TTFT_MS} paths), client-side TTFT (request sent → first content event), one request at a time, paths interleaved; for the targets, per block of unloadedBlock rounds`,
      gap_distortion: '|client gap − simulator send gap| per content event after the first (simulator stamps tokentap_sent_ms)',
      inside:
        'bench/el-probe.ts preloaded into every Node proxy (tokentap, the relays, Portkey): monitorEventLoopDelay (1 ms) and every GC pause (perf_hooks gc entries, by kind) over each load round; p99 is the median of the rounds, max and longest pause the largest, counts and totals summed',
      cpu: 'on-CPU time of all threads of the proxy process(es) (/proc/PID/task/*/schedstat, ns; bench/proc.ts) over the saturation runs, divided by content chunks delivered; short requests: the same over shortRequests streams of shortChunks content chunks (shortRequestsPortkey for Portkey), shortConcurrency at a time, divided by the requests, per round (shortRounds), after shortWarmUp uncounted requests of the same shape through each path (shortWarmUpPortkey for Portkey)',
      memory:
        'median of memoryRepeats runs (memoryRepeatsOthers for the paths other than tokentap), a full GC in the Node proxies before each sample (--expose-gc and the preloaded probe). Per open stream: VmRSS with openStreams streams open (each past its first content event) minus before, divided by openStreams; held_per_stream (Node paths): heapUsed + external with the streams open minus the same once they are released and gone, divided by openStreams. Portkey keeps reading an upstream after its client leaves, so its streams (60 chunks 100 ms apart) are left to end rather than released. A repeat whose RSS with the streams open is below its baseline (the baseline still held the previous repeat’s pages) is left out of the medians and counted in <path>_invalid_runs. ' +
        'Stalled reader (tokentap): stallReaders clients stop reading a fast stream (stallChunks chunks, no gaps) at once; once no chunk moved for 500 ms, heapUsed + external after a full GC minus the same once they are released and gone, divided by stallReaders = stalled_reader_held; ' +
        'stalled_reader_kib = that minus the same for a control of as many streams read normally to the same number of chunks and left open (control_held): what the stall itself pins.',
      abort: `a counting upstream in the bench process streams abortChunks content events abortGapMs apart; the client reads abortAfter of them through the path, then destroys its socket; chunks_after_abort / bytes_after_abort = what the upstream still wrote after that moment, upstream_open_ms_after_abort = how long its response stayed open (median of abortRounds); read_to_end = rounds in which the proxy read it to the end`,
      scrape: SCRAPE_METHOD,
      overhead: `tokentap's ${overhead.metric}: its buckets summed over series, the scrape after the unloaded phase minus the one before, p50 interpolated in the bucket (as histogram_quantile), beside the client's side of the same span in the same phase: the first content chunk's one-way delay (simulator send stamp to client) p50 through tokentap minus direct, less the same through the TCP relay (one more loopback hop, which the proxy cannot see), and the added TTFT p50 for information`,
      targets: 'each a ratio of two paths within this run (against the Fastify relay unless said), or an absolute figure for memory and /metrics',
      verdict: VERDICT_RULE,
      load_pairs:
        'after the rounds every path takes, pairRounds rounds of tokentap and pairRounds + 1 of the Fastify relay, alternating and starting and ending with the relay; per round the TTFT p99 and gap distortion p99 over its streams and the event-loop delay p99 inside the proxy; the ratio of each tokentap round to the mean of the relay rounds before and after it',
      instructions:
        'bench/instructions.ts: tokentap and the Fastify relay each under valgrind --tool=callgrind --instr-atstart=no; instructionWarmUp short requests with instrumentation off, then callgrind_control -i on and -z, instructionRequests short requests (shortChunks content chunks, shortConcurrency at a time), 500 ms for the end-of-request work, callgrind_control -d: the dump’s totals (Ir, all threads) over exactly that window; both proxies loaded at once',
      growth:
        'bench/growth.ts on the bench’s tokentap after the other phases (the other Node proxies stopped): open streams growthStreams, each past its first content event and then trickling so tokentap moves growthRate chunks/s in all (descriptor limits raised with prlimit as needed): heap+external after a full GC open minus after they are gone, RSS open minus before, per stream; CPU over growthWindowMs divided by the chunks the client got. One stream of longChunks chunks from bench/long-upstream.ts, as fast as backpressure lets it, held open past its last content event: heap+external over before while open and after it ended. Streams of each of lengths chunks, lengthGapMs apart, lengthConcurrency at a time, about lengthChunks chunks each: CPU per chunk, per stream, and per chunk beyond the shorter length. Series: the scrape phase’s scales.',
      otel: otelMethod,
      accuracy: "proxy log line ttft_ms / itl_p50_ms against the client's own TTFT / median gap for the same request_id",
    },
    unloaded_ttft_ms: Object.fromEntries(all.map((p) => [p, pick(u[p])])),
    added_ttft_ms: Object.fromEntries(
      all.filter((p) => p !== 'direct' && p !== 'direct@50').map((p) => [p, { p50: round(added(p, 'p50')), p99: round(added(p, 'p99')), blocks_p50: addedBlocks(p).map((v) => round(v)) }]),
    ),
    load: loadOut,
    saturation: satOut,
    short_requests: shortOut,
    otel_short_requests: otel,
    memory,
    memory_runs: memoryRuns,
    client_abort: aborts,
    /** Lines Portkey wrote to stderr over the run (stack traces for clients that left mid-stream). */
    portkey_stderr_lines: portkeyStderr?.() ?? null,
    overhead,
    load_pairs: Object.fromEntries(P.loadLevels.map((n) => [n, { tokentap: pairResults[n].tokentap.rounds.map(roundOut), 'fastify-relay': pairResults[n].relay.rounds.map(roundOut) }])),
    instructions,
    growth,
    scrape: scales,
    accuracy: { unloaded: accuracyUnloaded, [`load_${P.loadLevels[0]}`]: accuracyLoad },
    targets: list.targets,
    floors: floors.targets,
    seconds: round((performance.now() - t0) / 1000, 0),
  }

  mkdirSync(OUT_DIR, { recursive: true })
  const jsonFile = join(OUT_DIR, QUICK ? 'quick.json' : 'latest.json')
  writeFileSync(jsonFile, `${JSON.stringify(result, null, 2)}\n`)
  const svg = gapChart(
    P.loadLevels.map((n) => ({
      title: `${n} streams, ${P.loadChunks} chunks ${P.loadGapMs} ms apart`,
      series: all.filter((p) => p !== 'direct@50').map((p) => ({ name: p, values: sorted(loadResults[n][p].distortions) })),
    })),
    `gap distortion |client gap − sender gap|; ${result.machine.cpu}, ${result.machine.nproc} cores, node ${process.version}, load average ${result.machine.loadavg_1m_at_start} → ${result.machine.loadavg_1m_at_end}, ${result.date.slice(0, 10)}`,
  )
  const svgFile = join(OUT_DIR, QUICK ? 'quick.svg' : 'gaps.svg')
  writeFileSync(svgFile, svg)
  const growthFile = writeGrowthChart(growth, scales, caption())
  process.stdout.write(table(result, all))
  process.stdout.write(describeGrowth(growth, scales))
  printTargets(
    `targets (${result.machine.cpu}, ${result.machine.nproc} cores, node ${result.machine.node}, load average ${result.machine.loadavg_1m_at_start} → ${result.machine.loadavg_1m_at_end}, ${result.seconds} s):`,
    list.targets,
    floors.targets,
  )
  process.stdout.write(`\nwrote ${jsonFile}\nwrote ${svgFile}\nwrote ${growthFile}\n`)
  rmSync(dir, { recursive: true, force: true })
  process.exit(0) // its 'exit' stops the children (stopOnExit)
}

// ---------------------------------------------------------------- memory

/** Bytes in use in the proxy after a full GC (tokentap: heap and buffers outside it, from the process itself). */
interface MemorySample {
  readonly rss: number
  /** heapUsed + external (which includes ArrayBuffers): what live objects hold; NaN for nginx. */
  readonly held: number
}

/**
 * Memory per open stream and per stalled reader, each repeated and reported as the median:
 * one stream's RSS delta is mostly allocator and heap-page noise, so many streams are measured
 * at once and divided, and tokentap's own heapUsed + external after a full GC is reported beside
 * RSS (it counts live objects only).
 * Stalled readers: `stallReaders` clients stop reading a fast stream; once the proxy stops
 * moving bytes (the kernel's socket buffers took what they could), the memory it holds is
 * sampled. The control is the same number of streams read normally up to the same number of
 * chunks and then idle (still open): the difference is what the stall itself pins (bytes the
 * proxy read but could not write), apart from what any stream that far along holds (its
 * marks, 8 bytes a chunk, and its sockets and objects).
 */
async function memoryPhase(
  p: 'tokentap' | 'node-relay' | 'tcp-relay' | 'nginx' | 'portkey',
  target: Target,
  pids: number[],
  ask: Ask | undefined,
  tt: Tokentap,
  runs: Record<string, number[]>,
): Promise<Record<string, number>> {
  const sample = async (): Promise<MemorySample> => {
    let held = NaN
    if (ask !== undefined) {
      const m = await ask('gc', 'gc-done')
      held = m.heapUsed + m.external
    }
    await sleep(200)
    return { rss: rssBytes(pids), held }
  }
  const run = (key: string, v: number): void => {
    const name = `${p}_${key}`
    if (runs[name] === undefined) runs[name] = []
    runs[name].push(round(v, 1))
  }
  const kib = (bytes: number, n: number): number => bytes / n / 1024
  const streamsInFlight = async (): Promise<{ n: number; chunks: number }> => {
    const r = (await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { in_flight: number; streams: { chunks: number }[] }
    return { n: r.in_flight, chunks: r.streams.reduce((a, s) => a + s.chunks, 0) }
  }
  // tokentap: until no request is in flight (released streams have finished recording), so a
  // baseline never still holds the previous step's streams.
  const idle = async (): Promise<void> => {
    if (p !== 'tokentap') return sleep(300)
    for (let i = 0; i < 100 && (await streamsInFlight()).n > 0; i++) await sleep(100)
  }
  // Portkey reads on after its client leaves: its streams (6 s) end on their own instead.
  const ends = p === 'portkey'
  const hold = request(target, evenPlan(ends ? 60 : 600, 100))
  const stallBody = requestBody(evenPlan(P.stallChunks, 0))
  let rssBefore = 0
  let rssOpen = 0
  const repeats = p === 'tokentap' ? P.memoryRepeats : P.memoryRepeatsOthers
  for (let r = 0; r < repeats; r++) {
    // Open streams: each has its first content event and waits for the next (100 ms apart).
    await sleep(500)
    await idle()
    const before = await sample()
    const opened = await job<number>({ kind: 'hold', ...hold, count: P.openStreams })
    await sleep(1500)
    const open = await sample()
    await job(ends ? { kind: 'drain', timeoutMs: 15_000 } : { kind: 'release' })
    // Less RSS with 1,000 streams open than without: the baseline still held pages of the repeat
    // before (Portkey, whose streams end on their own, frees ~100 KiB a stream of them late), so
    // this repeat's RSS measures nothing and is left out of the median (counted in
    // `invalid_runs`), with its heap figure for the paths whose baseline is `before` too.
    const valid = open.rss >= before.rss
    if (valid) {
      run('rss_per_stream_kib', kib(open.rss - before.rss, opened))
      run('rss_per_stream_max_kib', kib(open.rss - before.rss, opened))
    } else run('invalid_runs', 1)
    // Live memory against the state after the streams are gone: leftovers of an earlier step
    // still being freed at `before` would otherwise be subtracted from this one.
    await idle()
    const after = await sample()
    // tokentap's `after` waits until nothing is in flight; the others' can still hold the aborted
    // streams' leftovers on a busy machine (it came out above `open`): the lower baseline counts.
    // tokentap's live memory is measured against its own `after`, which RSS does not touch.
    if (ask !== undefined && (valid || p === 'tokentap')) run('held_per_stream_kib', kib(open.held - (p === 'tokentap' ? after.held : Math.min(before.held, after.held)), opened))
    if (r === 0) {
      rssBefore = before.rss
      rssOpen = open.rss
    }
    if (p !== 'tokentap') continue

    // Stalled readers. (No pause before the baselines beyond idle(): a stream leaves
    // /debug/streams once it is recorded, and the simulator, backpressured, holds nothing for the
    // streams it was writing.)
    await idle()
    const s0 = await sample()
    const stalled = await job<number>({ kind: 'stall', url: target.url, body: stallBody, count: P.stallReaders })
    let chunks = NaN
    {
      // Settled when no stream moved a chunk for 500 ms (looked at every 100 ms, for at most 30 s).
      let prev = -1
      let since = performance.now()
      for (let i = 0; i < 300; i++) {
        await sleep(100)
        const f = await streamsInFlight()
        if (f.chunks !== prev) {
          prev = f.chunks
          since = performance.now()
        } else if (performance.now() - since >= 500) break
      }
      chunks = prev / stalled
    }
    const s1 = await sample()
    await job({ kind: 'release' })
    run('stalled_reader_rss_kib', kib(s1.rss - s0.rss, stalled))
    await idle()
    const s2 = await sample()
    run('stalled_reader_held_kib', kib(s1.held - s2.held, stalled))
    run('stalled_reader_chunks', chunks)

    // Control: as many streams, read normally up to the same number of chunks, then idle.
    const k = Math.max(2, Math.round(chunks))
    const controlBody = requestBody({ ttft_ms: 0, chunks: [...Array.from({ length: k - 1 }, () => [0, 1]), [600_000, 1]] })
    await idle()
    const c0 = await sample()
    await job<number>({ kind: 'hold', url: target.url, body: controlBody, count: P.stallReaders })
    // Read to the same point: every control stream has its k chunks (the proxy's count).
    let reading = 0
    for (let i = 0; i < 100; i++) {
      const r = (await (await fetch(`http://127.0.0.1:${tt.adminPort}/debug/streams`)).json()) as { streams: { chunks: number }[] }
      reading = r.streams.length
      if (reading === P.stallReaders && r.streams.every((x) => x.chunks >= k)) break
      await sleep(200)
    }
    await sleep(500)
    const c1 = await sample()
    await job({ kind: 'release' })
    await idle()
    const c2 = await sample()
    run('control_held_kib', kib(c1.held - c2.held, reading))
    run('control_rss_kib', kib(c1.rss - c0.rss, reading))
    run('stalled_reader_kib', kib(s1.held - s2.held, stalled) - kib(c1.held - c2.held, reading))
  }
  const out: Record<string, number> = {
    [`${p}_open_streams`]: P.openStreams,
    [`${p}_rss_before_mib`]: round(rssBefore / 2 ** 20, 1),
    [`${p}_rss_open_mib`]: round(rssOpen / 2 ** 20, 1),
  }
  if (p === 'tokentap') out[`${p}_stalled_readers`] = P.stallReaders
  for (const [key, xs] of Object.entries(runs))
    if (key.startsWith(`${p}_`)) out[key] = key.endsWith('_invalid_runs') ? xs.length : round(key.endsWith('_max_kib') ? Math.max(...xs) : median(xs), key.endsWith('chunks') ? 0 : 1)
  return out
}

// ---------------------------------------------------------------- helpers

function pick(s: Summary): Record<string, number> {
  return { n: s.n, p50: round(s.p50), p90: round(s.p90), p99: round(s.p99), max: round(s.max), mean: round(s.mean) }
}

async function collectAccuracy(
  tt: Tokentap,
  results: readonly StreamResult[],
): Promise<{ requests: number; ttft_error_ms: Record<string, number>; ttft_abs_error_ms: Record<string, number>; itl_p50_abs_error_ms: Record<string, number> }> {
  for (let i = 0; i < 50 && results.some((r) => !tt.lines.has(r.id)); i++) await sleep(100)
  const ttftErr: number[] = []
  const itlErr: number[] = []
  for (const r of results) {
    const line = tt.lines.get(r.id)
    if (line?.ttft_ms === undefined || !Number.isFinite(r.ttft)) continue
    ttftErr.push(line.ttft_ms - r.ttft)
    if (r.gaps.length > 0 && line.itl_p50_ms !== undefined) itlErr.push(Math.abs(line.itl_p50_ms - summary(r.gaps).p50))
  }
  const signed = summary(ttftErr)
  return {
    requests: ttftErr.length,
    ttft_error_ms: { mean: round(signed.mean), p50: round(signed.p50) },
    ttft_abs_error_ms: pick(summary(ttftErr.map(Math.abs))),
    itl_p50_abs_error_ms: pick(summary(itlErr)),
  }
}

function machine(
  nginxBin: string | undefined,
  portkey: string | undefined,
): { nproc: number; cpu: string; node: string; nginx: string | null; portkey: string | null; kernel: string; loadavg_1m_at_start: number; loadavg_1m_at_end: number } {
  let cpu = cpus()[0]?.model ?? 'unknown'
  try {
    const m = /model name\s*:\s*(.+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))
    if (m !== null) cpu = m[1].trim()
  } catch {
    // not Linux
  }
  let kernel = ''
  try {
    kernel = readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim()
  } catch {
    // not Linux
  }
  let pk: string | null = null
  if (portkey !== undefined) {
    const version = (file: string): string => (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
    pk = `@portkey-ai/gateway ${version(join(PORTKEY_DIR, 'node_modules', '@portkey-ai', 'gateway', 'package.json'))}, @hono/node-server ${version(join(PORTKEY_DIR, 'node_modules', '@hono', 'node-server', 'package.json'))}`
  }
  // Other work on the machine skews every figure: the load average says how busy it was.
  return { nproc: cpus().length, cpu, node: process.version, nginx: nginxBin ?? null, portkey: pk, kernel, loadavg_1m_at_start: round(LOAD_AT_START, 2), loadavg_1m_at_end: round(loadavg()[0], 2) }
}

/** What `table` reads of the run's result (the JSON it writes). */
interface Report {
  readonly unloaded_ttft_ms: Record<string, Record<string, number>>
  readonly added_ttft_ms: Record<string, { p50: number; p99: number }>
  readonly load: Record<number, Record<string, { ttft: Record<string, number>; gap_distortion: Record<string, number>; one_way_delay: Record<string, number>; inside: Record<string, number> | null }>>
  readonly saturation: Record<string, { chunks_per_s: number; cpu_us_per_chunk: number | null }>
  readonly short_requests: Record<string, { cpu_ms_per_request: number }>
  readonly memory: Record<string, number>
  readonly client_abort: Record<string, AbortFigures>
  readonly scrape: readonly ScrapeFigures[]
  readonly accuracy: Record<string, { requests: number; ttft_abs_error_ms: Record<string, number>; itl_p50_abs_error_ms: Record<string, number> }>
  readonly overhead: {
    metric: string
    requests: number
    p50_ms: number | null
    client_added_first_chunk_p50_ms: number
    hop_first_chunk_p50_ms: number
    client_added_beyond_hop_p50_ms: number
    client_added_ttft_p50_ms: number
  }
}

function table(r: Report, paths: Path[]): string {
  const rows: string[][] = []
  const line = (...cells: (string | number | null | undefined)[]): void => void rows.push(cells.map((c) => (c === undefined || c === null || Number.isNaN(c) ? '–' : String(c))))
  const at = <T>(o: Record<string, T>, p: Path): T | undefined => o[p]
  line('metric', ...paths)
  line('unloaded TTFT p50 (ms)', ...paths.map((p) => r.unloaded_ttft_ms[p].p50))
  line('unloaded TTFT p99 (ms)', ...paths.map((p) => r.unloaded_ttft_ms[p].p99))
  line('added TTFT p50 (ms)', ...paths.map((p) => (p.startsWith('direct') ? 0 : r.added_ttft_ms[p].p50)))
  line('added TTFT p99 (ms)', ...paths.map((p) => (p.startsWith('direct') ? 0 : r.added_ttft_ms[p].p99)))
  for (const n of P.loadLevels) {
    line(`${n} streams: TTFT p99 (ms)`, ...paths.map((p) => r.load[n][p].ttft.p99))
    line(`${n} streams: gap distortion p50 (ms)`, ...paths.map((p) => r.load[n][p].gap_distortion.p50))
    line(`${n} streams: gap distortion p99 (ms)`, ...paths.map((p) => r.load[n][p].gap_distortion.p99))
    line(`${n} streams: gap distortion max (ms)`, ...paths.map((p) => r.load[n][p].gap_distortion.max))
    line(`${n} streams: one-way delay p99 (ms)`, ...paths.map((p) => r.load[n][p].one_way_delay.p99))
    line(
      `${n} streams: event-loop delay p99 / max (ms)`,
      ...paths.map((p) => {
        const i = r.load[n][p].inside
        return i === null ? null : `${i.event_loop_delay_p99_ms} / ${i.event_loop_delay_max_ms}`
      }),
    )
    line(
      `${n} streams: GC pauses n / total / longest (ms)`,
      ...paths.map((p) => {
        const i = r.load[n][p].inside
        return i === null ? null : `${i.gc_count} / ${i.gc_ms} / ${i.gc_max_ms}`
      }),
    )
    line(
      `${n} streams: mark-compacts n / total (ms)`,
      ...paths.map((p) => {
        const i = r.load[n][p].inside
        return i === null ? null : `${i.gc_mark_compact_count ?? 0} / ${i.gc_mark_compact_ms ?? 0}`
      }),
    )
  }
  line('saturation: chunks/s', ...paths.map((p) => at(r.saturation, p)?.chunks_per_s))
  line('saturation: CPU µs/chunk', ...paths.map((p) => at(r.saturation, p)?.cpu_us_per_chunk))
  line('short request: CPU ms/request', ...paths.map((p) => at(r.short_requests, p)?.cpu_ms_per_request))
  line('RSS per open stream (KiB)', ...paths.map((p) => r.memory[`${p}_rss_per_stream_kib`]))
  line('heap+external per open stream (KiB)', ...paths.map((p) => r.memory[`${p}_held_per_stream_kib`]))
  line('stalled reader: held in all (KiB)', ...paths.map((p) => r.memory[`${p}_stalled_reader_held_kib`]))
  line('stalled reader: beyond a reader (KiB)', ...paths.map((p) => r.memory[`${p}_stalled_reader_kib`]))
  line('client abort: chunks sent after', ...paths.map((p) => at(r.client_abort, p)?.chunks_after_abort))
  line('client abort: upstream open after (ms)', ...paths.map((p) => at(r.client_abort, p)?.upstream_open_ms_after_abort))
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)))
  let out = `\n${rows.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')).join('\n')}\n`
  out += `(@${SLOW_TTFT_MS} columns: the simulator's TTFT ${SLOW_TTFT_MS} ms higher, included in their TTFT rows; their added TTFT is against direct@${SLOW_TTFT_MS})\n`
  out += `\n${r.scrape.map((s) => `scrape: ${describeScrape(s)}\n`).join('')}`
  for (const [k, a] of Object.entries(r.accuracy)) {
    out += `accuracy (${k}, ${a.requests} requests): TTFT |proxy − client| mean ${a.ttft_abs_error_ms.mean} ms, p99 ${a.ttft_abs_error_ms.p99} ms; ITL p50 |error| mean ${a.itl_p50_abs_error_ms.mean} ms, p99 ${a.itl_p50_abs_error_ms.p99} ms\n`
  }
  const o = r.overhead
  out += `${o.metric} p50 (unloaded phase): ${o.p50_ms === null ? 'n/a (metric absent)' : `${o.p50_ms} ms over ${o.requests} requests`}; client side: the first chunk's one-way delay p50 ${o.client_added_first_chunk_p50_ms} ms over direct, ${o.client_added_beyond_hop_p50_ms} ms beyond the TCP relay's ${o.hop_first_chunk_p50_ms} ms (added TTFT p50 ${o.client_added_ttft_p50_ms} ms)\n`
  return out
}

await main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
