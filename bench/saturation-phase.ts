import type { Job, StreamResult } from './load-client.ts'
import { request, turns, type SimPlan, type Target } from './plans.ts'
import { cpuMicros } from './proc.ts'

export const SAT_CONCURRENCY = 8
export const SAT_CHUNKS = 2000

export interface SaturationDeps {
  job<T>(job: Job): Promise<T>
  /** Each path's target, in the order the paths take turns. */
  readonly urls: Readonly<Record<string, Target | string>>
  /** The proxy process(es) of each path whose CPU is counted (none for direct). */
  readonly pids: Readonly<Record<string, readonly number[] | undefined>>
  readonly plan: SimPlan
  readonly streams: number
  readonly concurrency: number
  readonly rounds: number
  readonly idPrefix?: string
  /**
   * Uncounted streams of the same plan through each path first: the first few hundred requests of
   * a new shape run code V8 has not optimised for it yet, and the rounds measure the steady state.
   */
  readonly warmUp?: number
  /** Other counts for some paths (one ten times as costly per request takes fewer a round). */
  readonly perPath?: Readonly<Record<string, { readonly streams?: number; readonly warmUp?: number }>>
}

interface SaturationRound {
  /** Content chunks the client counted, requests that completed, wall time. */
  chunks: number
  requests: number
  seconds: number
  /** On-CPU time of the path's proxy processes, all threads, µs (bench/proc.ts). */
  cpuUs: number
}

export interface SaturationFigures extends SaturationRound {
  rounds: SaturationRound[]
}

/**
 * Streams through each path in turn, round by round (each round starts one path later), with the
 * proxy's CPU from /proc; the window ends 100 ms after the last byte, as the proxy finishes
 * recording after it. Saturation (long streams, no gaps) and CPU per short request (3 chunks).
 */
export async function saturationPhase(deps: SaturationDeps): Promise<Record<string, SaturationFigures>> {
  const paths = Object.keys(deps.urls)
  const sat: Record<string, SaturationFigures> = Object.fromEntries(paths.map((p) => [p, { chunks: 0, requests: 0, seconds: 0, cpuUs: 0, rounds: [] }]))
  const streams = (p: string, count: number, id: string): Promise<StreamResult[]> =>
    deps.job<StreamResult[]>({ kind: 'streams', ...request(deps.urls[p], deps.plan), count, concurrency: deps.concurrency, phaseMs: 0, idPrefix: `${deps.idPrefix ?? 'sat'}-${id}`, detail: false })
  for (const p of paths) {
    const warmUp = deps.perPath?.[p]?.warmUp ?? deps.warmUp ?? 0
    if (warmUp > 0) await streams(p, warmUp, `warm-${p}`)
  }
  for (const { round: r, path: p } of turns(paths, deps.rounds)) {
    const pids = deps.pids[p] ?? []
    const cpu0 = cpuMicros(pids)
    const w0 = performance.now()
    const results = await streams(p, deps.perPath?.[p]?.streams ?? deps.streams, `${p}-${r}`)
    const seconds = (performance.now() - w0) / 1000
    await new Promise((res) => setTimeout(res, 100))
    const one: SaturationRound = { chunks: 0, requests: 0, seconds, cpuUs: cpuMicros(pids) - cpu0 }
    for (const res of results) {
      one.chunks += res.chunks
      if (res.ok) one.requests++
    }
    const all = sat[p]
    all.rounds.push(one)
    all.cpuUs += one.cpuUs
    all.seconds += seconds
    all.chunks += one.chunks
    all.requests += one.requests
  }
  return sat
}
