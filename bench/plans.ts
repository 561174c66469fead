import type { Job } from './load-client.ts'

/** What the benchmark asks the simulator for, and the order in which the paths take turns. */

/**
 * Where a path's requests go: most pass the body (and its `tokentap_sim` plan) through; a gateway
 * that drops unknown body fields gets the plan in `headers(plan)`; `ttftMs` is added to every plan's
 * TTFT (to hide a gateway's first-event wait). The last two serve bench/lab/compare.ts.
 */
export interface Target {
  readonly url: string
  readonly headers?: (plan: SimPlan) => Record<string, string>
  readonly ttftMs?: number
}

/** The part of a simulator plan the bench writes (see src/sim/schedule.ts). */
export interface SimPlan {
  readonly ttft_ms: number
  readonly chunks: readonly (readonly [number, number])[]
}

/** The URL, body and headers of a request for `plan` through `target` (a bare URL: body only). */
export function request(target: Target | string, plan: SimPlan): { url: string; body: string; headers?: Record<string, string> } {
  const t = typeof target === 'string' ? { url: target } : target
  const p = t.ttftMs === undefined ? plan : { ...plan, ttft_ms: plan.ttft_ms + t.ttftMs }
  return { url: t.url, body: requestBody(p), headers: t.headers?.(p) }
}

/** A streamed chat request whose answer the simulator plays as `plan` (tokentap_sim). */
export const requestBody = (plan: object, model = 'bench-model'): string => JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'bench' }], tokentap_sim: plan })

/** `chunks` one-token chunks, `gapMs` apart, the first after `ttftMs`. */
export const evenPlan = (chunks: number, gapMs: number, ttftMs = 0): SimPlan => ({ ttft_ms: ttftMs, chunks: Array.from({ length: chunks - 1 }, () => [gapMs, 1] as const) })

/** Every path once per round, each round starting one path later, so no path always inherits the same one's after-effects. */
export function* turns<P extends string>(paths: readonly P[], rounds: number): Generator<{ round: number; path: P }> {
  for (let round = 0; round < rounds; round++) for (let k = 0; k < paths.length; k++) yield { round, path: paths[(round + k) % paths.length] }
}

/** The load phases' streams: 100 one-token chunks 10 ms apart, all started within one gap. */
export const LOAD_CHUNKS = 100
export const LOAD_GAP_MS = 10

/** `streams` concurrent load streams through `url`, each chunk's timing kept (`detail`). */
export function loadJob(target: Target | string, streams: number, idPrefix: string): Job {
  return { kind: 'streams', ...request(target, evenPlan(LOAD_CHUNKS, LOAD_GAP_MS)), count: streams, concurrency: streams, phaseMs: LOAD_GAP_MS, idPrefix, detail: true }
}

/** Requests in a warm-up job. */
export const WARM_UP_COUNT = 300

/** Warm-up before any phase (JIT, connection pools): 300 short streams, 8 at a time. */
export function warmUpJob(target: Target | string, idPrefix: string): Job {
  return { kind: 'streams', ...request(target, evenPlan(20, 0)), count: WARM_UP_COUNT, concurrency: 8, phaseMs: 0, idPrefix, detail: false }
}

/** The short requests whose CPU is measured: 3 content chunks, no gaps. */
export const SHORT_CHUNKS = 3
export const SHORT_CONCURRENCY = 8
