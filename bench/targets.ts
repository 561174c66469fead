import type { ClusterScrapeFigures } from './cluster-phase.ts'
import type { ScrapeFigures } from './scrape-phase.ts'
import type { OverheadFigures } from './unloaded-phase.ts'
import { atMost, bracketRatios, ratios, type targetList } from './verdict.ts'

/**
 * The targets of issues 29, 15, 38 and 35, each against the Fastify relay unless said, judged by
 * bench/verdict.ts's rule; and, for information, the same measures between other pairs of paths
 * (the floors). A phase that did not run adds no row.
 */

export const BOUND = {
  cpuShort: 1.3,
  addedTtftMs: 0.15,
  load: 1.25,
  cpuPerChunk: 1,
  heldKib: 12,
  rssKib: 24,
  scrapeMs: { 1000: 20, 10000: 150 } as Record<number, number>,
  otel: 1.1,
  traces: 1.05,
  cluster: 1.5,
  overheadMs: 0.1,
}

/** One load round's figures (el_p99: NaN where the path has no probe: direct). */
export interface LoadRound {
  readonly ttft_p99: number
  readonly gap_distortion_p99: number
  readonly el_p99: number
}

export interface TargetInputs {
  loadLevels: readonly number[]
  /** Per level: the paired rounds (relay, tokentap, relay, …, relay), and the rounds every path took. */
  pair: Record<number, { readonly tokentap: readonly LoadRound[]; readonly relay: readonly LoadRound[] }>
  turns: Record<number, Readonly<Record<string, readonly LoadRound[]>>>
  /** Per path, per round: CPU ms per short request, added TTFT p50 per block of unloaded rounds (ms), CPU µs per chunk at saturation. */
  short: Record<string, readonly number[]>
  addedBlocks: Record<string, readonly number[]>
  satCpu: Record<string, readonly number[]>
  /** The memory phase's repeats, per path: heap + external and RSS per open stream, KiB. */
  held: Record<string, readonly number[]>
  rss: Record<string, readonly number[]>
  openStreams: number
  scales: readonly ScrapeFigures[]
  /** The OTel and traces rounds' on/off ratios. */
  otel: readonly number[]
  traces: readonly number[]
  /** The traces round's ratios over its first window (a fresh process), its one-off start cost per round (CPU ms), and the requests before each window. */
  tracesFresh: readonly number[]
  tracesStartMs: readonly number[]
  tracesWindows?: { readonly fresh: number; readonly steady: number; readonly steadyRequests?: number }
  cluster: readonly ClusterScrapeFigures[]
  overhead?: OverheadFigures
}

export function emptyInputs(openStreams: number): TargetInputs {
  return {
    loadLevels: [],
    pair: {},
    turns: {},
    short: {},
    addedBlocks: {},
    satCpu: {},
    held: {},
    rss: {},
    openStreams,
    scales: [],
    otel: [],
    traces: [],
    tracesFresh: [],
    tracesStartMs: [],
    cluster: [],
  }
}

type List = ReturnType<typeof targetList>

const get = <T>(o: Readonly<Record<string, readonly T[]>>, k: string): readonly T[] => o[k] ?? []
const col = (rs: readonly LoadRound[], f: keyof LoadRound): number[] => rs.map((r) => r[f])
const LOAD_FIGURES: readonly [keyof LoadRound, string][] = [
  ['gap_distortion_p99', 'gap distortion p99'],
  ['ttft_p99', 'TTFT p99'],
  ['el_p99', 'event-loop delay p99'],
]

/** Per-block differences of two paths' added TTFT p50 (ms). */
const addedOver = (i: TargetInputs, a: string, b: string): number[] => {
  const bs = get(i.addedBlocks, b)
  return get(i.addedBlocks, a)
    .map((v, k) => v - bs[k])
    .filter(Number.isFinite)
}

/** /metrics rows at 1,000 and 10,000 llm_ histogram series, text and protobuf. */
function scrapeTargets(i: TargetInputs, list: List): void {
  if (i.scales.length === 0) return
  for (const [series, bound] of Object.entries(BOUND.scrapeMs).map(([k, v]) => [Number(k), v])) {
    const f = i.scales.find((s) => s.series_asked === series)
    const name = (format: string): string => `/metrics p99 ≤ ${bound} ms with ${series.toLocaleString('en')} llm_ histogram series and traffic running, ${format}`
    if (f === undefined) {
      for (const format of ['text', 'protobuf']) list.T(name(format), 'n/a (scale not run)', 'n/a')
      continue
    }
    list.T(name('text'), `${f.ms.p99} ms (p50 ${f.ms.p50} ms; ${f.llm_histogram_series.toLocaleString('en')} series, ${(f.bytes / 2 ** 20).toFixed(2)} MiB, ${f.scrapes} scrapes)`, f.ms.p99 <= bound)
    if (f.protobuf === null) list.T(name('protobuf'), 'n/a (the proxy answers the protobuf Accept with text: not served)', 'n/a')
    else list.T(name('protobuf'), `${f.protobuf.ms.p99} ms (p50 ${f.protobuf.ms.p50} ms; ${(f.protobuf.bytes / 2 ** 20).toFixed(2)} MiB)`, f.protobuf.ms.p99 <= bound)
  }
}

export function issueTargets(i: TargetInputs, list: List): void {
  const cpuShort = ratios(get(i.short, 'tokentap'), get(i.short, 'fastify-relay'))
  if (cpuShort.length > 0) list.roundsRow(`CPU per short request ≤ ${BOUND.cpuShort} × the Fastify relay's (on-CPU time, rounds)`, cpuShort, atMost(BOUND.cpuShort))
  if (get(i.addedBlocks, 'tokentap').length > 0) {
    list.roundsRow(`added TTFT p50 ≤ the Fastify relay's + ${BOUND.addedTtftMs} ms (per block of unloaded requests)`, addedOver(i, 'tokentap', 'fastify-relay'), atMost(BOUND.addedTtftMs), ' ms')
  }
  for (const n of i.loadLevels) {
    for (const [f, what] of LOAD_FIGURES) {
      list.roundsRow(`${n} streams: ${what} ≤ ${BOUND.load} × the Fastify relay's (paired rounds)`, bracketRatios(col(i.pair[n].tokentap, f), col(i.pair[n].relay, f)), atMost(BOUND.load))
    }
  }
  if (get(i.satCpu, 'tokentap').length > 0) {
    list.roundsRow("CPU per content chunk at saturation ≤ the Node relay's", ratios(get(i.satCpu, 'tokentap'), get(i.satCpu, 'node-relay')), atMost(BOUND.cpuPerChunk))
  }
  if (get(i.held, 'tokentap').length > 0) {
    const at = `at ${i.openStreams.toLocaleString('en')} open streams`
    list.roundsRow(`heap + external per open stream ≤ ${BOUND.heldKib} KiB ${at}`, get(i.held, 'tokentap'), atMost(BOUND.heldKib), ' KiB')
    list.roundsRow(`RSS per open stream ≤ ${BOUND.rssKib} KiB ${at}`, get(i.rss, 'tokentap'), atMost(BOUND.rssKib), ' KiB')
  }
  scrapeTargets(i, list)
  if (i.otel.length > 0) list.roundsRow(`OTel export on (OTLP/HTTP protobuf): CPU per short request ≤ ${BOUND.otel} × off (a fresh pair a round)`, i.otel, atMost(BOUND.otel))
  if (i.traces.length > 0) {
    const w = i.tracesWindows
    const from = (n: number | undefined): string => (n === undefined ? '' : `, from request ${n.toLocaleString('en')}`)
    // A long-running proxy's CPU per request is its steady state; the export's code compiling in a fresh process is a one-off cost, its own row.
    list.roundsRow(
      `spans on (otel.traces at the default sampling): CPU per short request ≤ ${BOUND.traces} × off, steady state (a fresh pair a round${from(w?.steady)}${w?.steadyRequests === undefined ? '' : `, ${w.steadyRequests.toLocaleString('en')} requests`})`,
      i.traces,
      atMost(BOUND.traces),
    )
    if (i.tracesFresh.length > 0)
      list.roundsRow(`spans on: CPU per short request over a fresh process's first window${from(w?.fresh)}, for information (the one-off start cost in it)`, i.tracesFresh, undefined)
    if (i.tracesStartMs.length > 0)
      list.roundsRow('spans on: one-off start cost, CPU once per process beyond the steady state (SDK loading, the export code compiling)', i.tracesStartMs, undefined, ' ms')
  }
  for (const c of i.cluster) {
    for (const format of ['text', 'protobuf'] as const) {
      list.roundsRow(
        `the cluster primary's /metrics (workers: 2) ≤ ${BOUND.cluster} × one process's CPU at ${c.label_sets.toLocaleString('en')} label sets, ${format}`,
        c.rounds[format],
        atMost(BOUND.cluster),
      )
    }
  }
  const o = i.overhead
  if (o !== undefined) {
    list.T(
      `llm_proxy_overhead_seconds{phase="first_chunk"} p50 within ${BOUND.overheadMs} ms of the client-side added latency of the first chunk (unloaded; beyond one TCP hop)`,
      o.p50_ms === null ? 'n/a (metric absent)' : `${o.p50_ms} ms vs ${o.client_added_beyond_hop_p50_ms} ms (${o.requests} requests)`,
      o.difference_ms === null ? null : Math.abs(o.difference_ms) <= BOUND.overheadMs,
    )
  }
}

/** For information: the same measures between other pairs of paths. */
export function floorRows(i: TargetInputs, list: List): void {
  const compare = (a: string, b: string, what: string): void => {
    for (const n of i.loadLevels) {
      for (const [f, name] of LOAD_FIGURES) list.roundsRow(`${what}: ${n} streams, ${name}`, ratios(col(get(i.turns[n], a), f), col(get(i.turns[n], b), f)), undefined)
    }
    if (get(i.short, a).length > 0) list.roundsRow(`${what}: CPU per short request`, ratios(get(i.short, a), get(i.short, b)), undefined)
    if (get(i.addedBlocks, a).length > 0) list.roundsRow(`${what}: added TTFT p50`, addedOver(i, a, b), undefined, ' ms')
  }
  compare('fastify-relay', 'node-relay', 'the Fastify relay against the Node relay')
  compare('tokentap', 'fastify-relay', 'tokentap against the Fastify relay, in the rounds every path takes')
  if (get(i.short, 'tokentap').length > 0) {
    list.roundsRow('tokentap against the Node relay: CPU per short request (the earlier measure)', ratios(get(i.short, 'tokentap'), get(i.short, 'node-relay')), undefined)
  }
  for (const n of i.loadLevels) {
    for (const p of ['node-relay', 'fastify-relay']) list.roundsRow(`${p}: event-loop delay p99 at ${n} streams`, col(get(i.turns[n], p), 'el_p99'), undefined, ' ms')
    list.roundsRow(`the Fastify relay in the paired rounds: event-loop delay p99 at ${n} streams`, col(i.pair[n].relay, 'el_p99'), undefined, ' ms')
  }
}
