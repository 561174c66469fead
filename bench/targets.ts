import type { ScrapeFigures } from './scrape-phase.ts'
import { atMost, bracketRatios, ratios, type targetList } from './verdict.ts'

/**
 * The targets of issue 29, each against the Fastify relay (the floor for a Fastify plugin) unless
 * said, judged by bench/verdict.ts's rule; and, for information, the same measures between other
 * pairs of paths (the floors).
 */

export const BOUND = {
  cpuShort: 1.3,
  addedTtftMs: 0.15,
  load: 1.25,
  cpuPerChunk: 1,
  heldKib: 12,
  rssKib: 24,
  scrapeMs: { 1000: 20, 10000: 150 } as Record<number, number>,
}

/** One load round's figures (el_p99: NaN where the path has no probe: direct). */
export interface LoadRound {
  readonly ttft_p99: number
  readonly gap_distortion_p99: number
  readonly el_p99: number
}

export interface TargetInputs {
  readonly loadLevels: readonly number[]
  /** The paired phase (relay, tokentap, relay, …, relay), per level: each side's rounds in order. */
  readonly pair: Readonly<Record<number, { readonly tokentap: readonly LoadRound[]; readonly relay: readonly LoadRound[] }>>
  /** The rounds in which every path took turns, per level and path. */
  readonly turns: Readonly<Record<number, Readonly<Record<string, readonly LoadRound[]>>>>
  /** CPU ms per short request, per round, per path. */
  readonly short: Readonly<Record<string, readonly number[]>>
  /** Added TTFT p50 per block of unloaded rounds (ms), per path. */
  readonly addedBlocks: Readonly<Record<string, readonly number[]>>
  /** Saturation, per round: CPU µs per content chunk. */
  readonly satCpu: Readonly<Record<string, readonly number[]>>
  /** The memory phase's repeats, per path: heap + external and RSS per open stream, KiB. */
  readonly held: Readonly<Record<string, readonly number[]>>
  readonly rss: Readonly<Record<string, readonly number[]>>
  readonly openStreams: number
  readonly scales: readonly ScrapeFigures[]
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

/** Memory rows at the memory phase's scale (its repeats). */
function memoryTargets(i: TargetInputs, list: List): void {
  if (get(i.held, 'tokentap').length === 0) return
  list.roundsRow(`heap + external per open stream ≤ ${BOUND.heldKib} KiB at ${i.openStreams.toLocaleString('en')} open streams`, get(i.held, 'tokentap'), atMost(BOUND.heldKib), ' KiB')
  list.roundsRow(`RSS per open stream ≤ ${BOUND.rssKib} KiB at ${i.openStreams.toLocaleString('en')} open streams`, get(i.rss, 'tokentap'), atMost(BOUND.rssKib), ' KiB')
}

/** /metrics rows at 1,000 and 10,000 llm_ histogram series, text and protobuf. */
export function scrapeTargets(i: TargetInputs, list: List): void {
  for (const [series, bound] of Object.entries(BOUND.scrapeMs).map(([k, v]) => [Number(k), v])) {
    const f = i.scales.find((s) => s.series_asked === series)
    const name = (format: string): string => `/metrics p99 ≤ ${bound} ms with ${series.toLocaleString('en')} llm_ histogram series and traffic running, ${format}`
    if (f === undefined) {
      list.T(name('text'), 'n/a (scale not run)', 'n/a')
      list.T(name('protobuf'), 'n/a (scale not run)', 'n/a')
      continue
    }
    const at = `${f.llm_histogram_series.toLocaleString('en')} series, ${(f.bytes / 2 ** 20).toFixed(2)} MiB, ${f.scrapes} scrapes`
    list.T(name('text'), `${f.ms.p99} ms (p50 ${f.ms.p50} ms; ${at})`, f.ms.p99 <= bound)
    if (f.protobuf === null) list.T(name('protobuf'), 'n/a (the proxy answers the protobuf Accept with text: not served)', 'n/a')
    else list.T(name('protobuf'), `${f.protobuf.ms.p99} ms (p50 ${f.protobuf.ms.p50} ms; ${(f.protobuf.bytes / 2 ** 20).toFixed(2)} MiB)`, f.protobuf.ms.p99 <= bound)
  }
}

/** CPU per short request against the Fastify relay (on-CPU time, rounds). */
export function shortTargets(i: TargetInputs, list: List): void {
  list.roundsRow(`CPU per short request ≤ ${BOUND.cpuShort} × the Fastify relay's (on-CPU time, rounds)`, ratios(get(i.short, 'tokentap'), get(i.short, 'fastify-relay')), atMost(BOUND.cpuShort))
}

export function issueTargets(i: TargetInputs, list: List): void {
  shortTargets(i, list)
  list.roundsRow(`added TTFT p50 ≤ the Fastify relay's + ${BOUND.addedTtftMs} ms (per block of unloaded requests)`, addedOver(i, 'tokentap', 'fastify-relay'), atMost(BOUND.addedTtftMs), ' ms')
  for (const n of i.loadLevels) {
    const p = i.pair[n]
    for (const [f, what] of LOAD_FIGURES) {
      list.roundsRow(`${n} streams: ${what} ≤ ${BOUND.load} × the Fastify relay's (paired rounds)`, bracketRatios(col(p.tokentap, f), col(p.relay, f)), atMost(BOUND.load))
    }
  }
  list.roundsRow("CPU per content chunk at saturation ≤ the Node relay's", ratios(get(i.satCpu, 'tokentap'), get(i.satCpu, 'node-relay')), atMost(BOUND.cpuPerChunk))
  memoryTargets(i, list)
  scrapeTargets(i, list)
}

/** For information: the same measures between other pairs of paths. */
export function floorRows(i: TargetInputs, list: List): void {
  const compare = (a: string, b: string, what: string): void => {
    for (const n of i.loadLevels) {
      const t = i.turns[n]
      for (const [f, name] of LOAD_FIGURES) list.roundsRow(`${what}: ${n} streams, ${name}`, ratios(col(get(t, a), f), col(get(t, b), f)), undefined)
    }
    list.roundsRow(`${what}: CPU per short request`, ratios(get(i.short, a), get(i.short, b)), undefined)
    list.roundsRow(`${what}: added TTFT p50`, addedOver(i, a, b), undefined, ' ms')
  }
  compare('fastify-relay', 'node-relay', 'the Fastify relay against the Node relay')
  compare('tokentap', 'fastify-relay', 'tokentap against the Fastify relay, in the rounds every path takes')
  list.roundsRow('tokentap against the Node relay: CPU per short request (the earlier measure)', ratios(get(i.short, 'tokentap'), get(i.short, 'node-relay')), undefined)
  for (const n of i.loadLevels) {
    for (const p of ['node-relay', 'fastify-relay']) list.roundsRow(`${p}: event-loop delay p99 at ${n} streams`, col(get(i.turns[n], p), 'el_p99'), undefined, ' ms')
    list.roundsRow(`the Fastify relay in the paired rounds: event-loop delay p99 at ${n} streams`, col(i.pair[n].relay, 'el_p99'), undefined, ' ms')
  }
}
