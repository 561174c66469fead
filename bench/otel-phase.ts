import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Job } from './load-client.ts'
import { WARM_UP_COUNT, evenPlan, requestBody, warmUpJob } from './plans.ts'
import { cpuMicros, mainThreadCpuMicros, pidOf, startTokentap, stopOnExit } from './proc.ts'
import type { TokentapProcess } from './proc.ts'
import { round } from './stats.ts'
import { spread } from './verdict.ts'

/**
 * The OTel round of the bench (issue 15: with the OTLP export on, CPU per short request at most
 * 10% above it off; issue 38: with spans on, 5%; bench/targets.ts judges the rounds' ratios). Each round starts two tokentap processes with the same config but `otel:`,
 * the "on" one exporting OTLP/HTTP protobuf to a sink in the bench process every `intervalMs`
 * (1 s: the collection, serialisation and POST are in the figure, not only `record()`), warms
 * both (the "on" one's first export included), loads both at once with the short requests of the CPU phase and stops them. Loading them
 * at once gives both the same contention on a shared machine, which taking turns does not (one
 * process's CPU per request moved by ±40% from turn to turn there). CPU: on-CPU time (all threads, bench/proc.ts) of each
 * tokentap process from /proc; the figure is the median of the rounds' on/off ratios.
 * Spans (`steadyWarmRequests`): each pair is counted twice, over the first window (a fresh
 * process, its export's code still being compiled) and, after more requests through both, over
 * a steady one, which the target judges; the CPU the "on" process spent beyond the steady state
 * until then is the one-off start cost, a figure of its own (docs/performance.md, "Spans").
 * `control`: both with the export off, how far apart two equal processes measure.
 */

/** An OTLP/HTTP collector that accepts every export and discards it, counting requests and bytes. */
async function startOtlpSink() {
  let exports = 0
  let bytes = 0
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => {
      bytes += c.length
    })
    req.on('end', () => {
      exports++
      // An empty Export*ServiceResponse: a full success.
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/x-protobuf', 'content-length': '0' }).end()
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const close = (): Promise<void> => new Promise<void>((r) => server.close(() => r()).closeAllConnections())
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exports: () => exports, bytes: () => bytes, close }
}

export interface OtelPhaseOptions {
  job<T>(job: Job): Promise<T>
  /** dist/ (tokentap's server and the bench's probe are started from it). */
  readonly dist: string
  readonly simPort: number
  readonly maxModels: number
  /** Content chunks per request, requests per round, rounds (even: as many with either process first). */
  readonly chunks: number
  readonly requests: number
  readonly concurrency: number
  readonly rounds: number
  /** Short requests through each process of a pair before its round counts (after the usual warm-up). */
  readonly warmRequests: number
  /**
   * Traces: after that first window, this many more short requests through both, then a second
   * window, the steady one the ratio is taken from; the first window's ratio and the one-off start
   * cost are figures of their own (0: one window, as the metrics round).
   */
  readonly steadyWarmRequests?: number
  /** The steady window's requests (default `requests`): long enough to hold several of each process's collections. */
  readonly steadyRequests?: number
  /** The "on" process's export period (`otel.interval_ms`). */
  readonly intervalMs: number
  /** Both processes with the export off: how far apart two equal processes measure. */
  readonly control?: boolean
  /** `traces`: the "on" process exports spans (`otel.traces` at its default sampling) instead of the metrics. */
  readonly signal?: 'metrics' | 'traces'
  /** Where both processes of each round write a CPU profile (`DIR/off-R`, `DIR/on-R`; both, so the profiler's cost is on either side). */
  readonly cpuProfDir?: string
  /** Both processes run with `--trace-gc`; each round logs their collections within its counted window. */
  readonly traceGc?: boolean
  readonly log?: (line: string) => void
}

export interface OtelPhaseResult {
  /** Median over the rounds of each process's CPU µs per request. */
  readonly cpu_us_per_request: { readonly off: number; readonly on: number }
  /** Median of the rounds' on/off ratios (each round's pair ran at the same time). */
  readonly ratio_p50: number
  readonly ratios: number[]
  readonly rounds: { readonly off: number; readonly on: number }[]
  /** Each round's CPU µs per request of the main threads; the rest of a process's is its other threads' (V8's compiler and GC helpers, libuv's pool, the span export's thread). */
  readonly main_thread_rounds: { readonly off: number; readonly on: number }[]
  readonly requests_per_round: number
  /** Traces with a steady window: its requests (the first window's are `requests_per_round`). */
  readonly steady_requests_per_round: number
  readonly concurrency: number
  readonly chunks: number
  readonly interval_ms: number
  readonly control: boolean
  /** What the sink received over the whole phase (warm-up included). */
  readonly exports_received: number
  /** Of those, the exports received within the rounds' counted windows. */
  readonly exports_in_rounds: number
  readonly export_bytes: number
  /** Traces with a steady window: short requests between the two windows (0 otherwise). */
  readonly steady_warm_requests: number
  /** Each round's on/off ratio over its first window (requests WARM_UP_COUNT + warmRequests on), a fresh process's; `ratios` are the steady window's. */
  readonly fresh_ratios: number[]
  /** Each round's one-off start cost: CPU ms the "on" process spent beyond "off" until the steady window, less the steady excess per request over its requests until then; and of that, the main thread's. */
  readonly start_cost_ms: number[]
  readonly start_cost_main_ms: number[]
  /** Requests through each process before its first window and before its steady one. */
  readonly windows_from: { readonly first: number; readonly steady: number }
}

/** With an even number of rounds (as many in each order), the mean of the two middle ones. */
const median = (xs: readonly number[]): number => spread(xs).median

export async function otelPhase(o: OtelPhaseOptions): Promise<OtelPhaseResult> {
  const sink = await startOtlpSink()
  const dir = mkdtempSync(join(tmpdir(), 'tokentap-bench-otel-'))
  const profiling = o.cpuProfDir !== undefined
  let round_ = 0
  const traceGc = o.traceGc === true
  const gc = { off: newGcTally(), on: newGcTally() }
  const start = async (name: 'off' | 'on'): Promise<TokentapProcess> => {
    const tally = newGcTally()
    gc[name] = tally
    const p = await startTokentap(o.dist, mkdtempSync(join(dir, `${name}-`)), o.simPort, {
      maxModels: o.maxModels,
      flags: [...(o.cpuProfDir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', join(o.cpuProfDir, `${name}-${round_}`)]), ...(traceGc ? ['--trace-gc'] : [])],
      onLine: traceGc ? (line) => tallyGc(tally, line) : undefined,
      otel: name === 'off' || o.control === true || o.signal === 'traces' ? undefined : { endpoint: sink.url, intervalMs: o.intervalMs },
      traces: name === 'off' || o.control === true || o.signal !== 'traces' ? undefined : { endpoint: `${sink.url}/v1/traces` },
    })
    stopOnExit(p.proc)
    return p
  }
  const stop = async (p: TokentapProcess): Promise<void> => {
    if (p.proc.exitCode !== null || p.proc.signalCode !== null) return
    const exited = new Promise((r) => p.proc.once('exit', r))
    // SIGINT lets a profiled process drain and write its profile; the others have nothing to keep.
    p.proc.kill(profiling ? 'SIGINT' : 'SIGKILL')
    await exited
  }
  const url = (p: TokentapProcess): string => `http://127.0.0.1:${p.port}/t/v1/chat/completions`
  const body = requestBody(evenPlan(o.chunks, 0))
  const streams = (p: TokentapProcess, count: number, id: string): Job => ({ kind: 'streams', url: url(p), body, count, concurrency: o.concurrency, phaseMs: 0, idPrefix: id, detail: false })
  const cpu = (p: TokentapProcess): number => cpuMicros([pidOf(p.proc)])
  const mainCpu = (p: TokentapProcess): number => mainThreadCpuMicros(pidOf(p.proc))
  const rounds: { off: number; on: number }[] = []
  const mainRounds: { off: number; on: number }[] = []
  const freshRounds: { off: number; on: number }[] = []
  const startCost: number[] = []
  const startCostMain: number[] = []
  const steadyWarm = o.signal === 'traces' && o.control !== true ? (o.steadyWarmRequests ?? 0) : 0
  const steadyRequests = o.steadyRequests ?? o.requests
  let exportsInRounds = 0
  /** One counted window: `o.requests` through both at once, CPU µs per request (all threads, and the main ones). */
  const counted = async (pair: { off: TokentapProcess; on: TokentapProcess }, both: <T>(f: (p: 'off' | 'on') => Promise<T>) => Promise<[T, T]>, id: string, requests = o.requests) => {
    const { off, on } = pair
    const c0 = { off: cpu(off), on: cpu(on) }
    const m0 = { off: mainCpu(off), on: mainCpu(on) }
    const g0 = { off: { ...gc.off }, on: { ...gc.on } }
    const exportsAtStart = sink.exports()
    await both((name) => o.job(streams(pair[name], requests, `${id}-${name}`)))
    // Requests are recorded once they end: the last ones are done within this pause.
    await new Promise((res) => setTimeout(res, 100))
    // Spans are exported in batches (every 5 s, or at 512): the window ends once a batch has
    // gone out after its requests, so the export of its own spans is in the figure. Both are
    // read at that moment, over the same window (the idle tail costs both the same).
    if (o.signal === 'traces' && o.control !== true) {
      const exportsAtEnd = sink.exports()
      for (let i = 0; i < 200 && sink.exports() === exportsAtEnd; i++) await new Promise((res) => setTimeout(res, 50))
      await new Promise((res) => setTimeout(res, 100))
    }
    exportsInRounds += sink.exports() - exportsAtStart
    if (traceGc) for (const name of ['off', 'on'] as const) o.log?.(`    gc ${name} (${id}): ${describeGc(gc[name], g0[name])}`)
    return {
      one: { off: (cpu(off) - c0.off) / requests, on: (cpu(on) - c0.on) / requests },
      main: { off: (mainCpu(off) - m0.off) / requests, on: (mainCpu(on) - m0.on) / requests },
    }
  }
  try {
    for (let r = 0; r < o.rounds; r++) {
      round_ = r
      // A fresh pair each round: two equal processes kept for a whole phase differed by a steady
      // 3–10% in CPU per request, which more rounds with the same pair never average out.
      // Which one is started, warmed and loaded first alternates: the first of two equal processes
      // measured a few percent apart from the second over several pairs.
      const swap = r % 2 === 1
      const both = <T>(f: (p: 'off' | 'on') => Promise<T>): Promise<[T, T]> => (swap ? Promise.all([f('on'), f('off')]).then(([a, b]) => [b, a]) : Promise.all([f('off'), f('on')]))
      const exportsBefore = sink.exports()
      const [off, on] = await both(start)
      try {
        // JIT and pools warm in both before the round counts.
        const pair = { off, on }
        await both((name) => o.job(warmUpJob(url(pair[name]), `otel-warm-${r}-${name}`)))
        // The first export of a process is a start-up cost, so the short requests warm both after
        // it: it compiles the exporter and its serialiser, and (the OTLP metrics' exporter, which
        // runs in the main thread) its HTTP client's sockets, requests and timers are new shapes to
        // the Node stream, socket and timer code the byte path runs, whose optimised code V8 then
        // drops and rebuilds over the next requests (docs/performance.md, "Spans").
        // (The span processor exports every 5 s or at 512 spans: a traces round waits longer.)
        for (let i = 0; i < (o.signal === 'traces' ? 200 : 100) && o.control !== true && sink.exports() === exportsBefore; i++) await new Promise((res) => setTimeout(res, 50))
        await both((name) => o.job(streams(pair[name], o.warmRequests, `otel-warm3-${r}-${name}`)))
        const first = await counted(pair, both, `otel-r${r}`)
        let one = first.one
        let main = first.main
        if (steadyWarm > 0) {
          // The steady state: both warmed further (the export's code is still being compiled in the
          // first window), then counted again; what the "on" process spent beyond it until then is
          // its one-off start cost (its requests so far, the warm-up's counted as short ones, at the
          // steady window's excess).
          freshRounds.push(first.one)
          await both((name) => o.job(streams(pair[name], steadyWarm, `otel-warm4-${r}-${name}`)))
          const before = { off: cpu(off), on: cpu(on) }
          const beforeMain = { off: mainCpu(off), on: mainCpu(on) }
          const steady = await counted(pair, both, `otel-s${r}`, steadyRequests)
          one = steady.one
          main = steady.main
          // Requests through each process before its steady window.
          const served = WARM_UP_COUNT + o.warmRequests + o.requests + steadyWarm
          startCost.push((before.on - before.off - (one.on - one.off) * served) / 1000)
          startCostMain.push((beforeMain.on - beforeMain.off - (main.on - main.off) * served) / 1000)
          o.log?.(
            `  round ${r}: requests ${served - o.requests - steadyWarm}–${served - steadyWarm}: ${round(first.one.on / first.one.off, 3)}; from ${served}: steady ${round(one.on / one.off, 3)}; start cost ${round(startCost[r], 0)} ms of CPU (main thread ${round(startCostMain[r], 0)})`,
          )
        }
        rounds.push(one)
        mainRounds.push(main)
        o.log?.(`  otel round ${r}: off ${round(one.off, 1)}, on ${round(one.on, 1)} µs CPU/request (${round(one.on / one.off, 3)}; main threads ${round(main.off, 1)}, ${round(main.on, 1)})`)
      } finally {
        await Promise.all([stop(off), stop(on)])
      }
    }
  } finally {
    await sink.close()
    rmSync(dir, { recursive: true, force: true })
  }
  const ratios = rounds.map((x) => x.on / x.off)
  const ratio = median(ratios)
  return {
    cpu_us_per_request: { off: round(median(rounds.map((x) => x.off)), 1), on: round(median(rounds.map((x) => x.on)), 1) },
    ratio_p50: round(ratio, 3),
    ratios: ratios.map((x) => round(x, 3)),
    rounds: rounds.map((x) => ({ off: round(x.off, 1), on: round(x.on, 1) })),
    main_thread_rounds: mainRounds.map((x) => ({ off: round(x.off, 1), on: round(x.on, 1) })),
    requests_per_round: o.requests,
    steady_requests_per_round: steadyWarm > 0 ? steadyRequests : 0,
    concurrency: o.concurrency,
    chunks: o.chunks,
    interval_ms: o.intervalMs,
    control: o.control === true,
    exports_received: sink.exports(),
    exports_in_rounds: exportsInRounds,
    export_bytes: sink.bytes(),
    steady_warm_requests: steadyWarm,
    fresh_ratios: freshRounds.map((x) => round(x.on / x.off, 3)),
    start_cost_ms: startCost.map((x) => round(x, 1)),
    start_cost_main_ms: startCostMain.map((x) => round(x, 1)),
    windows_from: { first: WARM_UP_COUNT + o.warmRequests, steady: WARM_UP_COUNT + o.warmRequests + o.requests + steadyWarm },
  }
}

interface GcTally {
  scavenges: number
  scavengeMs: number
  markCompacts: number
  markCompactMs: number
}
const newGcTally = (): GcTally => ({ scavenges: 0, scavengeMs: 0, markCompacts: 0, markCompactMs: 0 })
/** A `--trace-gc` line: `… ms: Scavenge 3.8 (4.0) -> 3.4 (5.0) MB, 3.97 / 0.00 ms …`. */
function tallyGc(t: GcTally, line: string): void {
  const m = /ms: (Scavenge|Mark-Compact|Mark-sweep|Minor Mark-Compact)[^,]*,[^/]*?([\d.]+) \/ ([\d.]+) ms/.exec(line)
  if (m === null) return
  if (m[1] === 'Scavenge') {
    t.scavenges++
    t.scavengeMs += Number(m[2])
  } else {
    t.markCompacts++
    t.markCompactMs += Number(m[2])
  }
}
const describeGc = (t: GcTally, from: GcTally): string =>
  `${t.scavenges - from.scavenges} scavenges ${round(t.scavengeMs - from.scavengeMs, 1)} ms, ${t.markCompacts - from.markCompacts} mark-compacts ${round(t.markCompactMs - from.markCompactMs, 1)} ms`

/** One line for the report: on vs off and the ratio against the target. */
export function describeOtel(r: OtelPhaseResult): string {
  const line = `${r.cpu_us_per_request.on} µs on vs ${r.cpu_us_per_request.off} µs off = ${r.ratio_p50}× (median of ${r.ratios.length} rounds: ${r.ratios.join(', ')}; ${r.exports_received} exports received, ${r.exports_in_rounds} within the rounds)`
  if (r.steady_warm_requests === 0) return line
  const start = spread(r.start_cost_ms)
  return `steady: ${line}; first window ${round(median(r.fresh_ratios), 3)}× (${r.fresh_ratios.join(', ')}); one-off start cost ${round(start.median, 0)} ms of CPU (quartiles ${round(start.q1, 0)}–${round(start.q3, 0)}; main thread ${round(median(r.start_cost_main_ms), 0)})`
}
