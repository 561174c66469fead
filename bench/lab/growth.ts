import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Job } from '../load-client.ts'
import { PROMETHEUS_ACCEPT, describeScrape, scrapeAtSeries, servesProtobuf } from '../scrape-phase.ts'
import { BOUND } from '../targets.ts'
import { describeTarget, targetList } from '../verdict.ts'
import { growthChart } from './growth-chart.ts'
import { longBody, startLongUpstream } from './long-upstream.ts'
import type { LongUpstream } from './long-upstream.ts'
import { evenPlan, requestBody, warmUpJob } from '../plans.ts'
import { cpuMicros, machine, pidOf, rssBytes, startLoadClient, startPortPrinter, startTokentap, stopOnExit } from '../proc.ts'
import { saturationPhase } from '../saturation-phase.ts'
import { round } from '../stats.ts'

/**
 * `npm run bench:lab -- growth [--quick]`: writes bench/results/growth.json and growth.svg, and
 * judges memory per open stream at the largest step (8,000 streams) against the bounds of
 * bench/targets.ts.
 * "How the cost grows" (issue 29): what tokentap's cost does as the work grows, one axis at a
 * time, on one tokentap process (the series axis is the scrape phase at growing scales,
 * bench/scrape-phase.ts):
 * - open streams (100 → 1,000 → 8,000): heap + external and RSS per stream, and the CPU per
 *   content chunk while they all trickle at the same total rate;
 * - one stream of 1,000,000 chunks: what the proxy holds for it while open and after it ends;
 * - stream length (10 → 10,000 chunks, 1 ms apart, the same number of streams at once): CPU per
 *   chunk, and per chunk beyond the request's own cost.
 */

type Ask = (cmd: string, reply: string) => Promise<Record<string, number>>

interface GrowthDeps {
  job<T>(j: Job): Promise<T>
  /** tokentap's probe (a full GC and its memory figures). */
  readonly ask: Ask
  readonly pid: number
  /** tokentap's route to the simulator (chat completions). */
  readonly url: string
  /** tokentap's route to the long upstream (bench/long-upstream.ts). */
  readonly longUrl: string
  readonly long: LongUpstream
  readonly adminPort: number
  /** The other processes that hold one socket per stream (simulator, load generator). */
  readonly peers: readonly number[]
  readonly log?: (line: string) => void
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const KIB = 1024
const MIB = 2 ** 20

interface Sample {
  readonly held: number
  readonly heap: number
  readonly external: number
  readonly rss: number
}

/** The proxy's memory after a full GC (the probe collects three times, 100 ms apart). */
async function sample(d: GrowthDeps): Promise<Sample> {
  const m = await d.ask('gc', 'gc-done')
  await sleep(200)
  return { held: m.heapUsed + m.external, heap: m.heapUsed, external: m.external, rss: rssBytes([d.pid]) }
}

/** Until no request is in flight in the proxy (recorded and gone), at most 20 s. */
async function idle(d: GrowthDeps): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const r = (await (await fetch(`http://127.0.0.1:${d.adminPort}/debug/streams`)).json()) as { in_flight: number }
    if (r.in_flight === 0) return
    await sleep(100)
  }
}

interface OpenStreamsStep {
  readonly streams: number
  readonly opened: number
  /** Why the step did not run (the descriptor limit), when it did not. */
  readonly skipped?: string
  readonly gap_ms: number
  readonly held_kib_per_stream: number
  readonly heap_kib_per_stream: number
  readonly external_kib_per_stream: number
  readonly rss_kib_per_stream: number
  readonly cpu_us_per_chunk: number
  readonly chunks_in_window: number
  readonly chunks_per_s: number
}

/** Explicit plans longer than this would make a request body over 16 KiB (tokentap streams those instead). */
const MAX_PLAN_CHUNKS = 1500
/** Streams get one of this many plans, their second chunk at a different fraction of the gap. */
const PHASES = 16

/**
 * Per step: N streams opened (at most 200 per 10 ms), each past its first content event, then one
 * chunk every N / rate seconds each, so the proxy moves `rate` chunks a second whatever N is.
 * Memory: after a full GC with the streams open, heap + external minus the same once they are
 * released and gone, and RSS minus before they opened, divided by the streams. CPU: the proxy's
 * over `windowMs` with them open, divided by the content chunks the client received meanwhile.
 */
async function openStreamsGrowth(d: GrowthDeps, steps: readonly number[], rate: number, windowMs: number): Promise<OpenStreamsStep[]> {
  const out: OpenStreamsStep[] = []
  for (const n of steps) {
    const gap = (n * 1000) / rate
    // Two sockets a stream in the proxy, one in the client and one in the simulator, and a margin.
    const proxyLimit = raiseOpenFiles([d.pid], 2 * n + 256)
    const peerLimit = raiseOpenFiles(d.peers, n + 256)
    if (proxyLimit < 2 * n + 256 || peerLimit < n + 256) {
      const skipped = `descriptor limit ${Math.min(proxyLimit, peerLimit)} (needs ${2 * n + 256} in the proxy, ${n + 256} in the client and the simulator)`
      d.log?.(`  ${n} open streams: skipped, ${skipped}`)
      out.push({
        streams: n,
        opened: 0,
        skipped,
        gap_ms: gap,
        held_kib_per_stream: NaN,
        heap_kib_per_stream: NaN,
        external_kib_per_stream: NaN,
        rss_kib_per_stream: NaN,
        cpu_us_per_chunk: NaN,
        chunks_in_window: 0,
        chunks_per_s: NaN,
      })
      continue
    }
    const chunks = Math.min(MAX_PLAN_CHUNKS, Math.ceil(120_000 / gap) + 2)
    const bodies = Array.from({ length: PHASES }, (_, k) =>
      requestBody({ ttft_ms: 0, chunks: [[Math.round((gap * (k + 1)) / PHASES), 1], ...Array.from({ length: chunks - 2 }, () => [Math.round(gap), 1])] }),
    )
    await idle(d)
    const before = await sample(d)
    const opened = await d.job<number>({ kind: 'hold', url: d.url, body: '', bodies, count: n, rampPerTick: 200, timeoutMs: 120_000 })
    await sleep(1500)
    const open = await sample(d)
    const e0 = await d.job<number>({ kind: 'events' })
    const c0 = cpuMicros([d.pid])
    await sleep(windowMs)
    const e1 = await d.job<number>({ kind: 'events' })
    const c1 = cpuMicros([d.pid])
    await d.job({ kind: 'release' })
    await idle(d)
    const after = await sample(d)
    const per = (bytes: number): number => round(bytes / Math.max(1, opened) / KIB, 1)
    const step: OpenStreamsStep = {
      streams: n,
      opened,
      gap_ms: gap,
      held_kib_per_stream: per(open.held - after.held),
      heap_kib_per_stream: per(open.heap - after.heap),
      external_kib_per_stream: per(open.external - after.external),
      rss_kib_per_stream: per(open.rss - before.rss),
      cpu_us_per_chunk: round((c1 - c0) / Math.max(1, e1 - e0), 2),
      chunks_in_window: e1 - e0,
      chunks_per_s: round(((e1 - e0) * 1000) / windowMs, 0),
    }
    d.log?.(
      `  ${n} open streams (${opened} opened, a chunk every ${gap} ms each): heap+external ${step.held_kib_per_stream} KiB/stream, RSS ${step.rss_kib_per_stream} KiB/stream, CPU ${step.cpu_us_per_chunk} µs/chunk over ${step.chunks_in_window} chunks`,
    )
    out.push(step)
  }
  return out
}

interface LongStreamFigures {
  readonly chunks: number
  /** Content events the client received. */
  readonly received: number
  readonly seconds: number
  readonly cpu_us_per_chunk: number
  /** heap + external held with the stream open past its last content event, over before it. */
  readonly held_open_mib: number
  readonly held_open_bytes_per_chunk: number
  /** The same once the stream has ended and been recorded. */
  readonly held_after_kib: number
  readonly rss_before_mib: number
  readonly rss_open_mib: number
  readonly rss_after_mib: number
}

/** One stream of `chunks` through the long route, held open past its last content event until `finish`. */
const openLong = (d: GrowthDeps, chunks: number): Promise<number> => d.job<number>({ kind: 'hold', url: d.longUrl, body: longBody(chunks), count: 1, until: chunks, timeoutMs: 600_000 })
async function endLong(d: GrowthDeps): Promise<void> {
  d.long.finish()
  await d.job({ kind: 'drain', timeoutMs: 30_000 })
  await idle(d)
}

/**
 * One stream of `chunks` content events through the proxy, as fast as it goes; memory before,
 * open, after. A short stream on the same route first, so the model's series (created by its
 * first request) are in the baseline rather than in "after".
 */
async function longStream(d: GrowthDeps, chunks: number): Promise<LongStreamFigures> {
  await openLong(d, 1000)
  await endLong(d)
  const before = await sample(d)
  const c0 = cpuMicros([d.pid])
  const t0 = performance.now()
  const received = await openLong(d, chunks)
  const seconds = (performance.now() - t0) / 1000
  const cpu = cpuMicros([d.pid]) - c0
  await sleep(500)
  const open = await sample(d)
  await endLong(d)
  const after = await sample(d)
  const f: LongStreamFigures = {
    chunks,
    received: received === 1 ? chunks : 0,
    seconds: round(seconds, 1),
    cpu_us_per_chunk: round(cpu / chunks, 2),
    held_open_mib: round((open.held - before.held) / MIB, 2),
    held_open_bytes_per_chunk: round((open.held - before.held) / chunks, 1),
    held_after_kib: round((after.held - before.held) / KIB, 1),
    rss_before_mib: round(before.rss / MIB, 1),
    rss_open_mib: round(open.rss / MIB, 1),
    rss_after_mib: round(after.rss / MIB, 1),
  }
  d.log?.(
    `  one stream of ${chunks.toLocaleString('en')} chunks (${f.seconds} s, ${f.cpu_us_per_chunk} µs/chunk): held ${f.held_open_mib} MiB while open (${f.held_open_bytes_per_chunk} B/chunk), ${f.held_after_kib} KiB after it ended; RSS ${f.rss_before_mib} → ${f.rss_open_mib} → ${f.rss_after_mib} MiB`,
  )
  return f
}

interface LengthStep {
  readonly chunks_per_stream: number
  readonly streams: number
  readonly chunks: number
  readonly chunks_per_s: number
  readonly cpu_us_per_chunk: number
  readonly cpu_us_per_stream: number
  /** (CPU per stream here − at the shorter length before) / (the difference in chunks): the cost of one more chunk. */
  readonly marginal_us_per_chunk: number | null
}

/**
 * Streams of each length, `gapMs` between chunks and `concurrency` at a time (so the chunk rate is
 * the same at every length), about `chunksPerLength` chunks in all (at least `concurrency` streams):
 * CPU per chunk and per stream, and the marginal cost of a chunk between two lengths, which
 * leaves the request's own cost out and should not grow with the length.
 */
async function lengthGrowth(d: GrowthDeps, lengths: readonly number[], gapMs: number, concurrency: number, chunksPerLength: number): Promise<LengthStep[]> {
  const out: LengthStep[] = []
  for (const len of lengths) {
    const streams = Math.max(concurrency, Math.round(chunksPerLength / len))
    await idle(d)
    const f = (await saturationPhase({ job: d.job, urls: { tokentap: d.url }, pids: { tokentap: [d.pid] }, plan: evenPlan(len, gapMs), streams, concurrency, rounds: 1, idPrefix: `length${len}` }))
      .tokentap
    const perStream = f.cpuUs / Math.max(1, f.requests)
    const prev = out.at(-1)
    const step: LengthStep = {
      chunks_per_stream: len,
      streams,
      chunks: f.chunks,
      chunks_per_s: round(f.chunks / f.seconds, 0),
      cpu_us_per_chunk: round(f.cpuUs / Math.max(1, f.chunks), 2),
      cpu_us_per_stream: round(perStream, 1),
      marginal_us_per_chunk: prev === undefined ? null : round((perStream - prev.cpu_us_per_stream) / (len - prev.chunks_per_stream), 2),
    }
    d.log?.(
      `  streams of ${len} chunks (${streams}, ${concurrency} at a time, ${step.chunks_per_s} chunks/s): ${step.cpu_us_per_chunk} µs/chunk, ${step.cpu_us_per_stream} µs/stream${step.marginal_us_per_chunk === null ? '' : `, ${step.marginal_us_per_chunk} µs per chunk more than ${prev?.chunks_per_stream}`}`,
    )
    out.push(step)
  }
  return out
}

/** A process's soft and hard limits on open descriptors (/proc/PID/limits). */
function openFilesLimit(pid: number): { soft: number; hard: number } {
  const m = /Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'))
  const n = (s: string | undefined): number => (s === undefined ? 0 : s === 'unlimited' ? Infinity : Number(s))
  return { soft: n(m?.[1]), hard: n(m?.[2]) }
}

/**
 * Raises each process's soft limit on open descriptors to its hard limit when it is below `need`
 * (util-linux `prlimit --pid`; raising the soft limit up to the hard one needs no privilege), and
 * returns the lowest soft limit that results: a step needing more is skipped, not left to fail.
 * Each open stream holds two sockets in a proxy and one in the client and in the upstream.
 */
function raiseOpenFiles(pids: readonly number[], need: number): number {
  let lowest = Infinity
  for (const pid of pids) {
    let { soft, hard } = openFilesLimit(pid)
    if (soft < need && hard > soft) {
      try {
        const to = Number.isFinite(hard) ? String(hard) : 'unlimited'
        execFileSync('prlimit', ['--pid', String(pid), `--nofile=${to}:${to}`], { stdio: 'ignore' })
      } catch {
        // no prlimit: the limit stays, and the step that needs it is skipped
      }
      soft = openFilesLimit(pid).soft
    }
    lowest = Math.min(lowest, soft)
  }
  return lowest
}

// ---------------------------------------------------------------- the tool

const DIST = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const QUICK = process.argv.includes('--quick')
const LOAD_AT_START = loadavg()[0]
const P = {
  growthStreams: QUICK ? [100, 300] : [100, 1000, 8000],
  growthRate: 2000,
  growthWindowMs: QUICK ? 2000 : 5000,
  longChunks: QUICK ? 100_000 : 1_000_000,
  lengths: QUICK ? [10, 100, 1000] : [10, 100, 1000, 10_000],
  lengthGapMs: 1,
  lengthConcurrency: 10,
  lengthChunks: QUICK ? 5000 : 30_000,
  seriesScales: QUICK ? [100, 1000] : [100, 1000, 10_000],
  scrapesAt: QUICK ? [20, 50] : [50, 200, 40],
}
const log = (line: string): void => void process.stderr.write(`[growth] ${line}\n`)
const work = mkdtempSync(join(tmpdir(), 'tokentap-growth-'))
const load = startLoadClient(join(DIST, 'bench', 'load-client.js'))
stopOnExit(load.proc)
const job = <T>(j: Job): Promise<T> => load.job<T>(j)
const sim = await startPortPrinter(join(DIST, 'src', 'sim', 'cli.js'), [])
stopOnExit(sim.proc)
const long = await startLongUpstream()
const tt = await startTokentap(DIST, work, sim.port, { maxModels: 2000, extraRoutes: [{ prefix: '/l', upstream: `http://127.0.0.1:${long.port}` }] })
stopOnExit(tt.proc)
const url = `http://127.0.0.1:${tt.port}/t/v1/chat/completions`
await job(warmUpJob(url, 'warm'))
const d: GrowthDeps = {
  job,
  ask: tt.ask,
  pid: pidOf(tt.proc),
  url,
  longUrl: `http://127.0.0.1:${tt.port}/l/v1/chat/completions`,
  long,
  adminPort: tt.adminPort,
  peers: [pidOf(sim.proc), pidOf(load.proc)],
  log,
}
log(`${P.growthStreams.join(' → ')} open streams (${P.growthRate} chunks/s in all)`)
const open = await openStreamsGrowth(d, P.growthStreams, P.growthRate, P.growthWindowMs)
log(`one stream of ${P.longChunks} chunks`)
const one = await longStream(d, P.longChunks)
log(`streams of ${P.lengths.join(' → ')} chunks`)
const lengths = await lengthGrowth(d, P.lengths, P.lengthGapMs, P.lengthConcurrency, P.lengthChunks)
await long.close()
const scrapeDeps = { job, ask: tt.ask, pid: pidOf(tt.proc), streamUrl: url, metricsUrl: `http://127.0.0.1:${tt.adminPort}/metrics`, accept: PROMETHEUS_ACCEPT, gzip: true, body: requestBody }
const protobuf = await servesProtobuf(scrapeDeps)
const scales = []
for (let i = 0; i < P.seriesScales.length; i++) {
  scales.push(await scrapeAtSeries(scrapeDeps, P.seriesScales[i], P.scrapesAt[i], protobuf))
  log(describeScrape(scales[i]))
}

// Memory per open stream at the largest step, against the memory phase's bounds.
const list = targetList()
const largest = open.at(-1)
if (largest !== undefined) {
  const name = (what: string, bound: number): string => `${what} per open stream ≤ ${bound} KiB at ${largest.streams.toLocaleString('en')} open streams`
  const why = largest.skipped ?? (largest.opened < largest.streams ? `only ${largest.opened} of ${largest.streams} streams opened within the step's 120 s` : undefined)
  const of = `(${largest.opened.toLocaleString('en')} opened, one repeat)`
  list.T(
    name('heap + external', BOUND.heldKib),
    why === undefined ? `${largest.held_kib_per_stream} KiB ${of}` : `n/a (${why})`,
    why === undefined ? largest.held_kib_per_stream <= BOUND.heldKib : 'n/a',
  )
  list.T(name('RSS', BOUND.rssKib), why === undefined ? `${largest.rss_kib_per_stream} KiB ${of}` : `n/a (${why})`, why === undefined ? largest.rss_kib_per_stream <= BOUND.rssKib : 'n/a')
}
const m = machine(LOAD_AT_START)
const ran = open.filter((s) => s.skipped === undefined)
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
      x: lengths.map((l) => l.chunks_per_stream),
      series: [
        { name: 'all of it', values: lengths.map((l) => l.cpu_us_per_chunk) },
        { name: 'beyond the shorter length', values: lengths.map((l) => l.marginal_us_per_chunk) },
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
      title: `one stream of ${one.chunks.toLocaleString('en')} chunks: held`,
      yLabel: 'MiB over before',
      x: ['before', 'open', 'ended'],
      series: [{ name: 'heap + external', values: [0, one.held_open_mib, one.held_after_kib / 1024] }],
    },
  ],
  `${m.cpu}, ${m.nproc} cores, node ${m.node}, load average ${m.loadavg_1m_at_start} → ${round(loadavg()[0], 2)}, ${new Date().toISOString().slice(0, 10)}`,
)
const results = join(DIST, '..', 'bench', 'results')
mkdirSync(results, { recursive: true })
writeFileSync(join(results, QUICK ? 'quick.growth.svg' : 'growth.svg'), svg)
writeFileSync(
  join(results, QUICK ? 'quick.growth.json' : 'growth.json'),
  `${JSON.stringify({ date: new Date().toISOString(), quick: QUICK, machine: m, parameters: P, growth: { open_streams: open, long_stream: one, lengths }, scrape: scales, targets: list.targets }, null, 2)}\n`,
)
let report = '\nhow the cost grows (tokentap):\n'
for (const s of open)
  report +=
    s.skipped !== undefined
      ? `  ${s.streams} open streams: skipped (${s.skipped})\n`
      : `  ${s.streams} open streams: heap+external ${s.held_kib_per_stream} KiB/stream, RSS ${s.rss_kib_per_stream} KiB/stream, CPU ${s.cpu_us_per_chunk} µs/chunk\n`
report += `  one stream of ${one.chunks} chunks: held ${one.held_open_mib} MiB open, ${one.held_after_kib} KiB after; ${one.cpu_us_per_chunk} µs/chunk\n`
for (const l of lengths)
  report += `  streams of ${l.chunks_per_stream} chunks: ${l.cpu_us_per_chunk} µs/chunk${l.marginal_us_per_chunk === null ? '' : `, ${l.marginal_us_per_chunk} µs beyond the shorter length`}\n`
process.stdout.write(`${report}\ntargets:\n${list.targets.map((t) => `${describeTarget(t)}\n`).join('')}`)
process.exit(0)
