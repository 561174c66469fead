import type { Job, StreamResult } from './load-client.ts'
import { turns } from './plans.ts'
import { cpuMicros } from './proc.ts'

/** The full run's saturation: 32 streams of 2,000 chunks with no gaps, 8 at a time. */
export const SAT_STREAMS = 32
export const SAT_CONCURRENCY = 8
export const SAT_CHUNKS = 2000

/** What the saturation phase needs: the load generator, each path's URL and proxy processes. */
export interface SaturationDeps {
  job<T>(job: Job): Promise<T>
  /** Stream URL per path, in the order the paths take turns. */
  readonly urls: Readonly<Record<string, string>>
  /** The proxy process(es) of each path whose CPU is counted (none for direct). */
  readonly pids: Readonly<Record<string, readonly number[] | undefined>>
  /** A request whose simulated answer has no gaps. */
  readonly body: string
  readonly streams: number
  readonly concurrency: number
  readonly rounds: number
}

export interface SaturationFigures {
  chunks: number
  seconds: number
  /** utime + stime of the path's proxy processes over its rounds, µs. */
  cpuUs: number
}

/**
 * Streams with no gaps through each path in turn, round by round (each round starts one path
 * later): content chunks the client counted, wall time, and the proxy's CPU from /proc. The
 * CPU window ends 100 ms after the last byte, as the proxy finishes recording after it.
 */
export async function saturationPhase(deps: SaturationDeps): Promise<Record<string, SaturationFigures>> {
  const paths = Object.keys(deps.urls)
  const sat: Record<string, SaturationFigures> = Object.fromEntries(paths.map((p) => [p, { chunks: 0, seconds: 0, cpuUs: 0 }]))
  for (const { round: r, path: p } of turns(paths, deps.rounds)) {
    const pids = deps.pids[p] ?? []
    const cpu0 = cpuMicros(pids)
    const w0 = performance.now()
    const results = await deps.job<StreamResult[]>({ kind: 'streams', url: deps.urls[p], body: deps.body, count: deps.streams, concurrency: deps.concurrency, phaseMs: 0, idPrefix: `sat-${p}-${r}`, detail: false })
    const seconds = (performance.now() - w0) / 1000
    await new Promise((res) => setTimeout(res, 100))
    sat[p].cpuUs += cpuMicros(pids) - cpu0
    sat[p].seconds += seconds
    for (const res of results) sat[p].chunks += res.chunks
  }
  return sat
}
