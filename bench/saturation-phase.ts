import type { Job, StreamResult } from './load-client.ts'
import { request, turns } from './plans.ts'
import type { SimPlan, Target } from './plans.ts'
import { cpuMicros } from './proc.ts'

export const SAT_CONCURRENCY = 8
export const SAT_CHUNKS = 2000

/** What a CPU phase needs: the load generator, each path's target and proxy processes. */
export interface SaturationDeps {
  job<T>(job: Job): Promise<T>
  /** Each path's target (or URL), in the order the paths take turns. */
  readonly urls: Readonly<Record<string, Target | string>>
  /** The proxy process(es) of each path whose CPU is counted (none for direct). */
  readonly pids: Readonly<Record<string, readonly number[] | undefined>>
  /** What the simulator plays for each request (the saturation phase: no gaps). */
  readonly plan: SimPlan
  readonly streams: number
  readonly concurrency: number
  readonly rounds: number
  /** Prefix of the request ids (default `sat`). */
  readonly idPrefix?: string
  /**
   * Streams of the same plan through each path before the rounds, not counted: the first few
   * hundred requests of a new shape run code V8 has not optimised for it yet (the earlier
   * phases streamed other shapes), and the rounds measure the steady state.
   */
  readonly warmUp?: number
  /**
   * Other streams and warm-up counts for some paths (a path ten times as costly per request
   * takes fewer per round, so more rounds of the others fit the same time).
   */
  readonly perPath?: Readonly<Record<string, { readonly streams?: number; readonly warmUp?: number }>>
}

interface SaturationRound {
  /** Content chunks the client counted. */
  chunks: number
  /** Requests that completed. */
  requests: number
  seconds: number
  /** On-CPU time of the path's proxy processes, all threads, µs (bench/proc.ts). */
  cpuUs: number
}

export interface SaturationFigures extends SaturationRound {
  /** The same, round by round (in the order they ran). */
  rounds: SaturationRound[]
}

/**
 * Streams through each path in turn, round by round (each round starts one path later): content
 * chunks and completed requests the client counted, wall time, and the proxy's CPU from /proc.
 * The CPU window ends 100 ms after the last byte, as the proxy finishes recording after it.
 * Used for saturation (long streams, no gaps) and for CPU per short request (3 chunks).
 */
export async function saturationPhase(deps: SaturationDeps): Promise<Record<string, SaturationFigures>> {
  const paths = Object.keys(deps.urls)
  const sat: Record<string, SaturationFigures> = Object.fromEntries(paths.map((p) => [p, { chunks: 0, requests: 0, seconds: 0, cpuUs: 0, rounds: [] }]))
  const warmUpOf = (p: string): number => deps.perPath?.[p]?.warmUp ?? deps.warmUp ?? 0
  const streamsOf = (p: string): number => deps.perPath?.[p]?.streams ?? deps.streams
  for (const p of paths) {
    if (warmUpOf(p) > 0) {
      await deps.job<StreamResult[]>({
        kind: 'streams',
        ...request(deps.urls[p], deps.plan),
        count: warmUpOf(p),
        concurrency: deps.concurrency,
        phaseMs: 0,
        idPrefix: `${deps.idPrefix ?? 'sat'}-warm-${p}`,
        detail: false,
      })
    }
  }
  for (const { round: r, path: p } of turns(paths, deps.rounds)) {
    const pids = deps.pids[p] ?? []
    const cpu0 = cpuMicros(pids)
    const w0 = performance.now()
    const results = await deps.job<StreamResult[]>({
      kind: 'streams',
      ...request(deps.urls[p], deps.plan),
      count: streamsOf(p),
      concurrency: deps.concurrency,
      phaseMs: 0,
      idPrefix: `${deps.idPrefix ?? 'sat'}-${p}-${r}`,
      detail: false,
    })
    const seconds = (performance.now() - w0) / 1000
    await new Promise((res) => setTimeout(res, 100))
    const one: SaturationRound = { chunks: 0, requests: 0, seconds, cpuUs: cpuMicros(pids) - cpu0 }
    for (const res of results) {
      one.chunks += res.chunks
      if (res.ok) one.requests++
    }
    sat[p].rounds.push(one)
    sat[p].cpuUs += one.cpuUs
    sat[p].seconds += seconds
    sat[p].chunks += one.chunks
    sat[p].requests += one.requests
  }
  return sat
}
