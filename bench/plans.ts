import type { Job } from './load-client.ts'

/** What the benchmark asks the simulator for, and the order in which the paths take turns. */

/** A streamed chat request whose answer the simulator plays as `plan` (tokentap_sim). */
export const requestBody = (plan: object, model = 'bench-model'): string => JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'bench' }], tokentap_sim: plan })

/** `chunks` one-token chunks, `gapMs` apart, the first after `ttftMs`. */
export const evenPlan = (chunks: number, gapMs: number, ttftMs = 0): object => ({ ttft_ms: ttftMs, chunks: Array.from({ length: chunks - 1 }, () => [gapMs, 1]) })

/**
 * Every path once per round, each round starting one path later, so no path always follows the
 * same one (and inherits its after-effects).
 */
export function* turns<P extends string>(paths: readonly P[], rounds: number): Generator<{ round: number; path: P }> {
  for (let round = 0; round < rounds; round++) for (let k = 0; k < paths.length; k++) yield { round, path: paths[(round + k) % paths.length] }
}

/** The load phases' streams: 100 one-token chunks 10 ms apart, all started within one gap. */
export const LOAD_CHUNKS = 100
export const LOAD_GAP_MS = 10

/** `streams` concurrent load streams through `url`, each chunk's timing kept (`detail`). */
export function loadJob(url: string, streams: number, idPrefix: string): Job {
  return { kind: 'streams', url, body: requestBody(evenPlan(LOAD_CHUNKS, LOAD_GAP_MS)), count: streams, concurrency: streams, phaseMs: LOAD_GAP_MS, idPrefix, detail: true }
}

/** Warm-up before any phase (JIT, connection pools): 300 short streams, 8 at a time. */
export function warmUpJob(url: string, idPrefix: string): Job {
  return { kind: 'streams', url, body: requestBody(evenPlan(20, 0)), count: 300, concurrency: 8, phaseMs: 0, idPrefix, detail: false }
}
