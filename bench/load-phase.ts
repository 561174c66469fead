import type { Job, StreamResult } from './load-client.ts'
import { loadJob, turns, type Target } from './plans.ts'
import { round, sorted, summary, type Summary } from './stats.ts'
import type { LoadRound } from './targets.ts'

/**
 * Under load: concurrent streams of LOAD_CHUNKS chunks LOAD_GAP_MS apart. Per round, the client's
 * TTFT p99 and gap distortion p99, and the event-loop delay and GC inside every Node proxy
 * (bench/el-probe.ts, asked over IPC before and after the round).
 */

export type Ask = (cmd: string, reply: string) => Promise<Record<string, number>>

export interface LoadDeps {
  job<T>(job: Job): Promise<T>
  readonly targets: Readonly<Record<string, Target>>
  /** The probe of each path that has one (none for direct and nginx). */
  readonly asks: Readonly<Record<string, Ask | undefined>>
}

/** One path's rounds at one level: every stream's figures, and per round its p99s and the probe's figures. */
export interface LoadAcc {
  readonly ttft: number[]
  readonly distortions: number[]
  readonly delays: number[]
  readonly rounds: LoadRound[]
  readonly loop: Record<string, number>[]
}

const newAcc = (): LoadAcc => ({ ttft: [], distortions: [], delays: [], rounds: [], loop: [] })

async function loadRound(d: LoadDeps, n: number, p: string, id: string, acc: LoadAcc): Promise<void> {
  const ask = d.asks[p]
  if (ask !== undefined) await ask('el-start', 'el-started')
  const results = await d.job<StreamResult[]>(loadJob(d.targets[p], n, id))
  const loop = ask === undefined ? undefined : await ask('el-stop', 'el')
  if (loop !== undefined) acc.loop.push(loop)
  const ttft: number[] = []
  const dist: number[] = []
  for (const res of results) {
    if (!res.ok) continue
    ttft.push(res.ttft)
    dist.push(...res.distortions)
    acc.delays.push(...res.delays)
  }
  acc.ttft.push(...ttft)
  acc.distortions.push(...dist)
  acc.rounds.push({ ttft_p99: summary(ttft).p99, gap_distortion_p99: summary(dist).p99, el_p99: loop?.p99 ?? NaN })
  await new Promise((r) => setTimeout(r, 200))
}

/** `rounds` rounds of `n` streams in which every path takes a turn (each round starting one path later). */
export async function turnRounds(d: LoadDeps, n: number, rounds: number): Promise<Record<string, LoadAcc>> {
  const paths = Object.keys(d.targets)
  const acc: Record<string, LoadAcc> = Object.fromEntries(paths.map((p) => [p, newAcc()]))
  for (const { round: r, path: p } of turns(paths, rounds)) await loadRound(d, n, p, `load${n}-${p}-${r}`, acc[p])
  return acc
}

/**
 * The paired rounds the load targets judge: `relay` and `subject` alone, relay first and last
 * (relay, subject, relay, …, relay), so each subject round can be set against the relay rounds on
 * either side of it (bench/verdict.ts's bracketRatios).
 */
export async function pairedRounds(d: LoadDeps, n: number, rounds: number, relay: string, subject: string): Promise<{ subject: LoadAcc; relay: LoadAcc }> {
  const pr = { subject: newAcc(), relay: newAcc() }
  for (let r = 0; r < rounds; r++) {
    await loadRound(d, n, relay, `pair${n}-relay-${r}`, pr.relay)
    await loadRound(d, n, subject, `pair${n}-${subject}-${r}`, pr.subject)
  }
  await loadRound(d, n, relay, `pair${n}-relay-${rounds}`, pr.relay)
  return pr
}

export function pick(s: Summary): Record<string, number> {
  return { n: s.n, p50: round(s.p50), p90: round(s.p90), p99: round(s.p99), max: round(s.max), mean: round(s.mean) }
}

/** The probe's figures over a path's rounds: event-loop delay p99 (median of the rounds), its max, GC pauses summed. */
function inside(rounds: readonly Record<string, number>[]): Record<string, number> | null {
  if (rounds.length === 0) return null
  const sum = (k: string): number => rounds.reduce((n, r) => n + r[k], 0)
  const p99s = sorted(rounds.map((r) => r.p99))
  return {
    event_loop_delay_p99_ms: round(p99s[(p99s.length - 1) >> 1]),
    event_loop_delay_max_ms: round(Math.max(...rounds.map((r) => r.max))),
    rounds: rounds.length,
    gc_count: sum('gc_count'),
    gc_ms: round(sum('gc_ms'), 2),
    gc_max_ms: round(Math.max(...rounds.map((r) => r.gc_max_ms)), 2),
  }
}

/** What the results keep of a path's load rounds. */
export function loadFigures(a: LoadAcc) {
  return {
    ttft: pick(summary(a.ttft)),
    gap_distortion: pick(summary(a.distortions)),
    one_way_delay: pick(summary(a.delays)),
    rounds: a.rounds.map((r) => ({ ttft_p99: round(r.ttft_p99), gap_distortion_p99: round(r.gap_distortion_p99), el_p99: round(r.el_p99) })),
    inside: inside(a.loop),
  }
}

export type LoadFigures = ReturnType<typeof loadFigures>
